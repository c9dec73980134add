"""Pull mode agrees with server mode, end to end: the real server binary,
users with 0 to 10,000 exposures spread over the retention window, and for
each user the filter pulled with GetFilter and decoded by the independent
Python decoder (clients/python) must answer every candidate exactly as the
server's FilterRecalled does -- over 100,000 random candidates in all.

Run by ctest (tests/e2e/CMakeLists.txt) with EF_E2E_SERVER and PYTHONPATH
set (clients/python and build/python for the generated messages).
"""

import os

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import random  # pylint: disable=wrong-import-position
import sys
import time
import unittest

import grpc

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.client import ExposureFilterClient, FilterCache, connect
from exposure_filter.filter_view import FilterView

import server_harness as harness

DAY_MS = 24 * 3600 * 1000
# Exposures per user: the edges (0 and 10,000) and a spread between.
EXPOSURES = [0, 1, 2, 10, 31, 100, 400, 1000, 2500, 5000, 7500, 10000]
CANDIDATES_PER_USER = 9000
RECORD_BATCH = 1000
QUIET_WRITES = 10  # > RunSizing::kQuietWrites (8)


def mask_bit(mask, i):
    return bool(mask[i // 8] >> (i % 8) & 1)


class PullAgreementTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = harness.ServerProcess().start()
        cls.channel = connect(cls.server.address)
        # Generous timeout: sanitizer builds are slow; nothing is timed.
        cls.client = ExposureFilterClient(cls.channel, timeout_s=60)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()
        cls.server.close()

    def record(self, user, ids, keys, rng, now):
        items = [("id", i) for i in ids] + [("key", k) for k in keys]
        rng.shuffle(items)
        for start in range(0, len(items), RECORD_BATCH):
            chunk = items[start:start + RECORD_BATCH]
            # Each batch at its own time in the window: many slices, late
            # events, slices that grow several segments.
            t = now - rng.randrange(0, 29 * DAY_MS)
            self.client.record_exposure(pb.RecordExposureRequest(
                surface="homefeed",
                exposures=[pb.Exposure(
                    user_id=user, event_time_ms=t,
                    item_ids=[v for kind, v in chunk if kind == "id"],
                    item_keys=[v for kind, v in chunk if kind == "key"])]))

    def test_local_check_agrees_with_filter_recalled(self):
        rng = random.Random(20261123)
        now = int(time.time() * 1000)
        total = agreed = removed = exposed_checked = 0
        runs = sealed_runs = 0
        for u, n in enumerate(EXPOSURES):
            user = "user-%d" % u
            ids = [rng.getrandbits(64) for _ in range(n - n // 10)]
            keys = ["item:%d:%d" % (u, rng.getrandbits(40))
                    for _ in range(n // 10)]
            self.record(user, ids, keys, rng, now)
            if n >= 100:
                # Then QUIET_WRITES one-item writes at "now": the older
                # slices go quiet and the server seals them (re-codes their
                # runs at a universe below 2^b, docs/format2-design.md).
                for _ in range(QUIET_WRITES):
                    ids.append(rng.getrandbits(64))
                    self.client.record_exposure(pb.RecordExposureRequest(
                        surface="homefeed", exposures=[pb.Exposure(
                            user_id=user, event_time_ms=now,
                            item_ids=[ids[-1]])]))

            resp = self.client.get_filter(pb.GetFilterRequest(
                surface="homefeed", user_id=user))
            view = FilterView.parse(resp.filter)
            self.assertEqual(view.version, resp.version)
            self.assertEqual(view.format_version, 2)
            # The server records into fingerprint runs (Bloom segments come
            # only from a previous release's data dir), so this is the
            # runs' agreement, sealed (U < 2^b) and open alike.
            self.assertEqual(view.segments, [], user)
            self.assertEqual(bool(view.runs), n > 0, user)
            runs += len(view.runs)
            sealed_runs += sum(1 for r in view.runs
                               if r.universe != 1 << r.precision)

            # A third already exposed, the rest fresh; ids and keys.
            cand_ids, cand_keys = [], []
            for _ in range(CANDIDATES_PER_USER):
                if n and rng.random() < 1 / 3:
                    if keys and rng.random() < 0.1:
                        cand_keys.append(rng.choice(keys))
                    else:
                        cand_ids.append(rng.choice(ids))
                elif rng.random() < 0.1:
                    cand_keys.append("fresh:%d" % rng.getrandbits(48))
                else:
                    cand_ids.append(rng.getrandbits(64))
            server = self.client.filter_recalled(pb.FilterRecalledRequest(
                surface="homefeed", user_id=user, candidate_ids=cand_ids,
                candidate_keys=cand_keys, mode=pb.KEEP_MASK))
            local = view.keep_mask_ids(cand_ids) + view.keep_mask_keys(cand_keys)
            exposed = set(ids) | set(keys)
            for i, cand in enumerate(cand_ids + cand_keys):
                server_keeps = mask_bit(server.keep_mask, i)
                total += 1
                agreed += server_keeps == local[i]
                removed += not server_keeps
                if cand in exposed:
                    exposed_checked += 1
                    self.assertFalse(local[i], "false negative: %r" % (cand,))
            self.assertEqual(server.removed_count,
                             sum(1 for k in local if not k))
        print("\npull agreement: %d/%d candidates agree across %d users "
              "(%d removed, %d of them exposed; %d runs, %d sealed)"
              % (agreed, total, len(EXPOSURES), removed, exposed_checked,
                 runs, sealed_runs),
              file=sys.stderr)
        self.assertGreater(sealed_runs, 0)
        self.assertGreaterEqual(total, 100000)
        self.assertEqual(agreed, total)
        self.assertGreater(exposed_checked, 20000)
        self.assertGreater(total - removed, 50000)

    def test_revalidation_sends_no_bytes_until_the_filter_changes(self):
        cache = FilterCache(self.client)
        self.client.record_exposure(pb.RecordExposureRequest(
            surface="homefeed",
            exposures=[pb.Exposure(user_id="reval", item_ids=[1, 2])]))
        first = cache.get("homefeed", "reval")
        again = self.client.get_filter(pb.GetFilterRequest(
            surface="homefeed", user_id="reval", if_version=first.version))
        self.assertTrue(again.not_modified)
        self.assertEqual(again.filter, b"")
        self.assertIs(cache.get("homefeed", "reval"), first)
        self.client.record_exposure(pb.RecordExposureRequest(
            surface="homefeed",
            exposures=[pb.Exposure(user_id="reval", item_ids=[3])]))
        changed = cache.get("homefeed", "reval")
        self.assertNotEqual(changed.version, first.version)
        self.assertTrue(changed.may_contain_id(3))
        self.assertEqual((cache.full_pulls, cache.not_modified), (2, 1))

    def test_a_format1_only_client_gets_a_clear_refusal(self):
        """A client that declares it reads only format 1 is refused, naming
        both versions; one that declares nothing gets format 2, which a
        format-1 decoder rejects by its version field (never misreads)."""
        with self.assertRaises(grpc.RpcError) as ctx:
            self.client.get_filter(pb.GetFilterRequest(
                surface="homefeed", user_id="old-client",
                accepted_formats=[1]))
        self.assertEqual(ctx.exception.code(),
                         grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("this server encodes filter format 2; the request "
                      "accepts only 1", ctx.exception.details())
        resp = self.client.get_filter(pb.GetFilterRequest(
            surface="homefeed", user_id="old-client"))
        self.assertEqual(resp.filter[4:6], b"\x02\x00")


if __name__ == "__main__":
    unittest.main()
