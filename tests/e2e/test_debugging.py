"""End-to-end tests of the debugging RPCs: Explain on traced and
untraced users, a forced false positive from a tiny filter, and the
traced-user limits, through the real server binary and reflection-built
messages (as grpcurl would).

Run by ctest as e2e_python_debugging; by hand from tests/e2e/:
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \\
      /usr/bin/python3 -m unittest -v test_debugging
"""

import os

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import shutil  # pylint: disable=wrong-import-position
import tempfile
import time
import unittest

import grpc

import server_harness as harness
from test_e2e import Client, ServerTestCase, now_ms, DAY_MS, INVALID

# A surface whose filters are as small and as wrong as the server allows:
# fp 0.5 over 8 live slices of 2 s (retention 14 s), so a fresh item is
# filtered a few percent of the time and slices start every 2 s.
# Margin: a test's record, filter and explain must run before the
# slice they wrote ages out, at least 12 s later. Retention is the most the
# server allows for 2 s slices (retention / slice_span + 1 <= 8); the calls
# are a few RPCs, a small fraction of 12 s even for ASan on a loaded machine.
TINY = "tiny:fp_rate=0.5:retention=14s:slice_span=2s"
TINY_SPAN_MS = 2000
DEFAULT_SPAN_MS = 5 * DAY_MS


class DebugClient(Client):
    def __init__(self, address):
        super().__init__(address)
        self.Verdict = {
            name: self.ef.enum_value(
                "exposure.v1.ItemExplanation.Verdict", name)
            for name in ("KEPT", "FILTERED_RECORDED",
                         "FILTERED_FALSE_POSITIVE", "FILTERED_UNVERIFIED")}

    def explain(self, user_id, ids=(), keys=(), surface=""):
        return self.ef.call("Explain", surface=surface, user_id=user_id,
                            item_ids=list(ids), item_keys=list(keys))

    def trace_add(self, *users):
        return self.ef.call("AddTracedUsers", user_ids=list(users))

    def trace_remove(self, *users):
        return self.ef.call("RemoveTracedUsers", user_ids=list(users))

    def trace_list(self):
        return self.ef.call("ListTracedUsers")


class DebugTestCase(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.client.close()
        cls.client = DebugClient(cls.server.address)

    def traced_entry(self, user):
        for u in self.client.trace_list().users:
            if u.user_id == user:
                return u
        return None


class ExplainTest(DebugTestCase):
    FLAGS = ("--surfaces=" + TINY, "--trace_users=fromflag",
             "--max_candidates_per_request=5000")

    def test_flag_traced_user_is_listed(self):
        u = self.traced_entry("fromflag")
        self.assertIsNotNone(u)
        self.assertGreater(u.traced_since_ms, 0)
        self.assertEqual(u.entries, 0)

    def test_traced_user_exact_times_and_slices(self):
        c, V = self.client, self.client.Verdict
        self.assertEqual(c.trace_add("ex-traced").added, 1)
        t_now = now_ms() - 1000
        t_old = now_ms() - 6 * DAY_MS  # a live but older slice
        c.record(c.exposure("ex-traced", ids=[1, 2], keys=["v:9"], t=t_now),
                 c.exposure("ex-traced", ids=[1], t=t_old),
                 surface="homefeed")
        r = c.explain("ex-traced", ids=[1, 2, 3], keys=["v:9", "v:10"],
                      surface="homefeed")
        self.assertTrue(r.user_exists)
        self.assertTrue(r.traced)
        self.assertGreater(r.traced_since_ms, 0)
        self.assertEqual(r.trace_entries_dropped, 0)
        self.assertGreater(r.estimated_fp_rate, 0)
        self.assertLess(r.estimated_fp_rate, 0.01)
        self.assertEqual(len(r.live_slices), 2)
        items = list(r.items)
        self.assertEqual([i.WhichOneof("item") for i in items],
                         ["item_id"] * 3 + ["item_key"] * 2)
        self.assertEqual([i.item_id for i in items[:3]], [1, 2, 3])
        self.assertEqual([i.item_key for i in items[3:]], ["v:9", "v:10"])

        def slice_of(t):
            start = t // DEFAULT_SPAN_MS * DEFAULT_SPAN_MS
            return (start, start + DEFAULT_SPAN_MS)

        one = items[0]
        self.assertTrue(one.filtered)
        self.assertEqual(one.verdict, V["FILTERED_RECORDED"])
        self.assertEqual(list(one.recorded_exposures_ms), [t_old, t_now])
        self.assertEqual([(s.start_ms, s.end_ms) for s in one.claimed_by],
                         [slice_of(t_old), slice_of(t_now)])
        for item in (items[1], items[3]):
            self.assertEqual(item.verdict, V["FILTERED_RECORDED"])
            self.assertEqual(list(item.recorded_exposures_ms), [t_now])
        for item in (items[2], items[4]):
            # Fresh items of a 4-item user at fp 0.01: kept.
            self.assertFalse(item.filtered)
            self.assertEqual(item.verdict, V["KEPT"])
            self.assertEqual(len(item.claimed_by), 0)
            self.assertEqual(len(item.recorded_exposures_ms), 0)

    def test_untraced_user(self):
        c, V = self.client, self.client.Verdict
        c.record(c.exposure("ex-untraced", ids=[7]), surface="homefeed")
        r = c.explain("ex-untraced", ids=[7, 8], surface="homefeed")
        self.assertTrue(r.user_exists)
        self.assertFalse(r.traced)
        self.assertEqual(r.traced_since_ms, 0)
        self.assertEqual(r.items[0].verdict, V["FILTERED_UNVERIFIED"])
        self.assertTrue(r.items[0].filtered)
        self.assertEqual(len(r.items[0].claimed_by), 1)
        self.assertEqual(len(r.items[0].recorded_exposures_ms), 0)
        self.assertEqual(r.items[1].verdict, V["KEPT"])

    def test_explain_agrees_with_filter_recalled(self):
        c = self.client
        c.record(c.exposure("ex-agree", ids=range(100, 140)), surface="tiny")
        ids = list(range(100, 1100))
        kept = set(c.filter("ex-agree", ids=ids, surface="tiny").kept_ids)
        r = c.explain("ex-agree", ids=ids, surface="tiny")
        self.assertEqual([i.item_id for i in r.items if not i.filtered],
                         [i for i in ids if i in kept])

    def test_unknown_user_and_surface(self):
        c, V = self.client, self.client.Verdict
        for surface in ("homefeed", "never-written"):
            r = c.explain("ex-nobody", ids=[1], keys=["a"], surface=surface)
            self.assertFalse(r.user_exists)
            self.assertFalse(r.traced)
            self.assertEqual(r.estimated_fp_rate, 0)
            self.assertEqual([i.verdict for i in r.items], [V["KEPT"]] * 2)

    def wait_for_next_slice(self, after_ms):
        """Sleeps until a tiny slice starts strictly after `after_ms`."""
        boundary = (after_ms // TINY_SPAN_MS + 1) * TINY_SPAN_MS
        time.sleep(max(0, boundary - now_ms()) / 1000.0 + 0.05)

    def test_forced_false_positive_traced(self):
        """A traced user over the whole slice, a filter at fp ~5%: fresh
        items that are filtered are proven false positives."""
        c, V = self.client, self.client.Verdict
        c.trace_add("fp-traced")
        self.wait_for_next_slice(self.traced_entry("fp-traced").traced_since_ms)
        recorded = list(range(1, 81))  # one 64-byte block holds 83
        c.record(c.exposure("fp-traced", ids=recorded), surface="tiny")
        fresh = list(range(1000, 3000))
        r = c.explain("fp-traced", ids=recorded + fresh, surface="tiny")
        self.assertTrue(r.traced)
        self.assertGreater(r.estimated_fp_rate, 0.01)
        by_id = {i.item_id: i for i in r.items}
        for i in recorded:
            self.assertEqual(by_id[i].verdict, V["FILTERED_RECORDED"], i)
            self.assertEqual(len(by_id[i].recorded_exposures_ms), 1)
        filtered_fresh = [by_id[i] for i in fresh if by_id[i].filtered]
        # ~5% of 2,000: P(none) is astronomically small.
        self.assertGreater(len(filtered_fresh), 0)
        for item in filtered_fresh:
            self.assertEqual(item.verdict, V["FILTERED_FALSE_POSITIVE"])
            self.assertEqual(len(item.recorded_exposures_ms), 0)
            self.assertGreater(len(item.claimed_by), 0)
            for s in item.claimed_by:
                self.assertGreater(s.start_ms, r.traced_since_ms)
        kept_fresh = [by_id[i] for i in fresh if not by_id[i].filtered]
        self.assertTrue(all(i.verdict == V["KEPT"] for i in kept_fresh))

    def test_forced_false_positive_untraced(self):
        c, V = self.client, self.client.Verdict
        c.record(c.exposure("fp-untraced", ids=range(1, 81)), surface="tiny")
        r = c.explain("fp-untraced", ids=range(1000, 3000), surface="tiny")
        self.assertFalse(r.traced)
        filtered = [i for i in r.items if i.filtered]
        self.assertGreater(len(filtered), 0)
        self.assertTrue(all(i.verdict == V["FILTERED_UNVERIFIED"]
                            for i in filtered))

    def test_tracing_begun_mid_slice_proves_nothing(self):
        """Whether a filtered, unrecorded item is a proven false positive
        depends only on tracing covering its claiming slices."""
        c, V = self.client, self.client.Verdict
        c.record(c.exposure("fp-mid", ids=range(1, 81)), surface="tiny")
        c.trace_add("fp-mid")
        r = c.explain("fp-mid", ids=range(1000, 3000), surface="tiny")
        filtered = [i for i in r.items if i.filtered]
        self.assertGreater(len(filtered), 0)
        for item in filtered:
            covered = all(s.start_ms > r.traced_since_ms
                          for s in item.claimed_by)
            self.assertEqual(item.verdict,
                             V["FILTERED_FALSE_POSITIVE"] if covered
                             else V["FILTERED_UNVERIFIED"])
        # Items recorded before tracing began have no trace entries.
        r = c.explain("fp-mid", ids=[1], surface="tiny")
        self.assertEqual(len(r.items[0].recorded_exposures_ms), 0)
        self.assertEqual(r.items[0].verdict, V["FILTERED_UNVERIFIED"])

    def test_delete_user_drops_trace_entries(self):
        c, V = self.client, self.client.Verdict
        c.trace_add("ex-deleted")
        c.record(c.exposure("ex-deleted", ids=[5]), surface="homefeed")
        c.record(c.exposure("ex-deleted", ids=[5]), surface="video")
        self.assertEqual(self.traced_entry("ex-deleted").entries, 2)
        self.assertTrue(c.delete("ex-deleted", surface="homefeed").existed)
        u = self.traced_entry("ex-deleted")
        self.assertIsNotNone(u)  # still traced
        self.assertEqual(u.entries, 1)  # the video entry stays
        r = c.explain("ex-deleted", ids=[5], surface="homefeed")
        self.assertFalse(r.user_exists)
        self.assertEqual(r.items[0].verdict, V["KEPT"])
        r = c.explain("ex-deleted", ids=[5], surface="video")
        self.assertEqual(r.items[0].verdict, V["FILTERED_RECORDED"])

    def test_validation(self):
        c = self.client
        self.assertRpcError(INVALID, "user_id", c.explain, "")
        self.assertRpcError(INVALID, "user_id", c.explain, "x" * 300)
        self.assertRpcError(INVALID, "surface", c.explain, "u", ids=[1],
                            surface="Bad Name")
        self.assertRpcError(INVALID, "item_keys[1]", c.explain, "u",
                            keys=["a", ""])
        self.assertRpcError(INVALID, "item_ids", c.explain, "u",
                            ids=range(5001))
        self.assertRpcError(INVALID, "user_ids", c.trace_add)
        self.assertRpcError(INVALID, "user_ids[1]", c.trace_add, "a", "")
        self.assertRpcError(INVALID, "user_ids", c.trace_remove)
        self.assertIsNone(self.traced_entry("a"))  # rejected: nothing applied


class TraceLimitsTest(DebugTestCase):
    FLAGS = ("--trace_users=lim-a", "--trace_max_users=3",
             "--trace_max_entries_per_user=5")

    def test_max_users(self):
        c = self.client
        r = c.trace_add("lim-a", "lim-b", "lim-c")
        self.assertEqual((r.added, r.traced), (2, 3))
        err = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  "user_ids", c.trace_add, "lim-d", "lim-e")
        self.assertIn("--trace_max_users=3", err.details())
        listed = c.trace_list()
        self.assertEqual([u.user_id for u in listed.users],
                         ["lim-a", "lim-b", "lim-c"])
        self.assertEqual((listed.max_users, listed.max_entries_per_user),
                         (3, 5))
        self.assertEqual(c.trace_add("lim-a").added, 0)  # already traced
        r = c.trace_remove("lim-b", "lim-unknown")
        self.assertEqual((r.removed, r.traced), (1, 2))
        self.assertEqual(c.trace_add("lim-d").traced, 3)
        c.trace_remove("lim-d")

    def test_entries_cap_drops_oldest_and_says_so(self):
        c, V = self.client, self.client.Verdict
        c.record(c.exposure("lim-a", ids=range(1, 9)), surface="capped")
        u = self.traced_entry("lim-a")
        self.assertEqual((u.entries, u.entries_dropped), (5, 3))
        self.assertGreater(u.bytes, 0)
        r = c.explain("lim-a", ids=range(1, 9), surface="capped")
        self.assertEqual(r.trace_entries_dropped, 3)
        verdicts = [i.verdict for i in r.items]
        # The three oldest entries were dropped: their items are filtered
        # but can no longer be proven exposed.
        self.assertEqual(verdicts, [V["FILTERED_UNVERIFIED"]] * 3 +
                         [V["FILTERED_RECORDED"]] * 5)


class TraceFlagsTest(unittest.TestCase):
    def test_too_many_flag_users_fail_startup(self):
        rc, out = harness.run_to_exit("--trace_users=a,b,c",
                                      "--trace_max_users=2")
        self.assertNotEqual(rc, 0)
        self.assertIn("--trace_max_users", out)

    def test_negative_limit_fails_startup(self):
        rc, out = harness.run_to_exit("--trace_max_entries_per_user=-1")
        self.assertNotEqual(rc, 0)
        self.assertIn("trace_max_entries_per_user", out)


class TraceRestartTest(unittest.TestCase):
    """Traced users and their exact entries survive a clean restart and a
    kill -9 with --fsync=always; Explain tells the same story after it."""

    def run_restart(self, stop, flags=()):
        data_dir = tempfile.mkdtemp(prefix="ef_e2e_trace_")
        self.addCleanup(shutil.rmtree, data_dir, True)
        t1, t2 = now_ms() - 2000, now_ms() - 1000
        with harness.ServerProcess(*flags, data_dir=data_dir) as first:
            c = DebugClient(first.address)
            self.assertEqual(c.trace_add("tr-user", "tr-idle").added, 2)
            self.assertEqual(c.trace_add("tr-gone").added, 1)
            c.record(c.exposure("tr-user", ids=[11], keys=["k:1"], t=t1),
                     surface="homefeed")
            c.record(c.exposure("tr-user", ids=[11], t=t2),
                     c.exposure("tr-gone", ids=[5]), surface="homefeed")
            self.assertEqual(c.trace_remove("tr-gone").removed, 1)
            before = c.explain("tr-user", ids=[11, 12], keys=["k:1"],
                               surface="homefeed")
            listed = {u.user_id: u for u in c.trace_list().users}
            c.close()
            stop(first)
        with harness.ServerProcess(*flags, data_dir=data_dir) as second:
            c = DebugClient(second.address)
            after = c.explain("tr-user", ids=[11, 12], keys=["k:1"],
                              surface="homefeed")
            relisted = {u.user_id: u for u in c.trace_list().users}
            c.close()
        V = c.Verdict
        self.assertEqual(sorted(relisted), ["tr-idle", "tr-user"])
        self.assertEqual(relisted["tr-user"].entries, 3)
        self.assertTrue(after.traced)
        one, two, key = after.items
        self.assertEqual(list(one.recorded_exposures_ms), [t1, t2])
        self.assertEqual(one.verdict, V["FILTERED_RECORDED"])
        self.assertEqual(list(key.recorded_exposures_ms), [t1])
        self.assertEqual(key.verdict, V["FILTERED_RECORDED"])
        self.assertEqual(list(two.recorded_exposures_ms), [])
        self.assertNotEqual(two.verdict, V["FILTERED_RECORDED"])
        # Two clients, two reflected message classes: compare as text.
        self.assertEqual([str(i) for i in before.items],
                         [str(i) for i in after.items])
        return listed, relisted, before, after

    def test_clean_restart_keeps_everything(self):
        listed, relisted, before, after = self.run_restart(
            lambda server: self.assertEqual(server.stop(), 0))
        self.assertEqual(after.traced_since_ms, before.traced_since_ms)
        for user in ("tr-user", "tr-idle"):
            self.assertEqual(relisted[user].traced_since_ms,
                             listed[user].traced_since_ms)

    def test_kill_9_with_fsync_always_keeps_everything(self):
        listed, relisted, before, after = self.run_restart(
            lambda server: server.kill(), flags=("--fsync=always",))
        # Every acknowledged write logged its trace record in the same
        # commit, so recovery can vouch for the trace: no reset.
        self.assertEqual(after.traced_since_ms, before.traced_since_ms)
        self.assertEqual(relisted["tr-idle"].traced_since_ms,
                         listed["tr-idle"].traced_since_ms)


if __name__ == "__main__":
    unittest.main()
