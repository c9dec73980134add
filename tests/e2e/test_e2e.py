"""End-to-end tests: the real exposure-filter-server binary, driven over gRPC
from Python the way grpcurl would drive it: service discovery through server
reflection, request/response classes built at run time from the reflected
descriptors (no .proto files of ours), health via grpc.health.v1.

Run by ctest (tests/e2e/CMakeLists.txt), which sets EF_E2E_SERVER to the
binary. By hand:
  EF_E2E_SERVER=build/src/server/exposure-filter-server \
      /usr/bin/python3 -m unittest -v test_e2e      (from tests/e2e/)
"""

import os

# The Python client (grpc core 1.51) drives an idle channel's I/O only from
# the client-channel backup poller, every 5 s by default; so it would take up
# to 5 s to notice a server's GOAWAY on SIGTERM and close its connection, and
# until then the server waits (within --shutdown_grace) for that connection.
# Real clients with a live poller react at once; poll often here too. Must be
# set before grpc is imported.
os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import signal  # pylint: disable=wrong-import-position
import socket
import struct
import time
import unittest

import grpc

import reflection_client as rc
import server_harness as harness

SERVICE = "exposure.v1.ExposureFilter"
HEALTH = "grpc.health.v1.Health"
EF_METHODS = {"RecordExposure", "FilterRecalled", "GetFilter", "GetUserStats",
              "DeleteUser", "GetServerStats"}
# Debugging RPCs, tested in test_debugging.py.
EF_METHODS |= {"Explain", "AddTracedUsers", "RemoveTracedUsers",
               "ListTracedUsers"}
# The session stream (docs/session-stream.md).
EF_METHODS |= {"Session"}
DAY_MS = 24 * 3600 * 1000
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def now_ms():
    return int(time.time() * 1000)


def mask_bits(mask, n):
    """Bit i of a KEEP_MASK (LSB-first within each byte)."""
    return [bool(mask[i // 8] >> (i % 8) & 1) for i in range(n)]


class Client:
    """Dynamic stubs for ExposureFilter and Health on one channel, built only
    from what the server's reflection service returns."""

    def __init__(self, address):
        self.channel = grpc.insecure_channel(address)
        with rc.ReflectionClient(self.channel) as refl:
            self.pool = refl.pool_for_symbols([SERVICE, HEALTH])
        self.ef = rc.DynamicService(self.channel, self.pool, SERVICE)
        self.health = rc.DynamicService(self.channel, self.pool, HEALTH)
        self.Exposure = self.ef.message_class("exposure.v1.Exposure")
        self.KEPT_IDS = self.ef.enum_value("exposure.v1.ResultMode", "KEPT_IDS")
        self.KEEP_MASK = self.ef.enum_value("exposure.v1.ResultMode",
                                            "KEEP_MASK")

    def close(self):
        self.channel.close()

    def record(self, *exposures, surface=""):
        return self.ef.call("RecordExposure", surface=surface,
                            exposures=list(exposures))

    def exposure(self, user_id, ids=(), keys=(), t=0):
        return self.Exposure(user_id=user_id, item_ids=list(ids),
                             item_keys=list(keys), event_time_ms=t)

    def filter(self, user_id, ids=(), keys=(), surface="", mode=None):
        return self.ef.call(
            "FilterRecalled", surface=surface, user_id=user_id,
            candidate_ids=list(ids), candidate_keys=list(keys),
            mode=self.KEPT_IDS if mode is None else mode)

    def get_filter(self, user_id, surface="", if_version=""):
        return self.ef.call("GetFilter", surface=surface, user_id=user_id,
                            if_version=if_version)

    def user_stats(self, user_id, surface=""):
        return self.ef.call("GetUserStats", surface=surface, user_id=user_id)

    def delete(self, user_id, surface=""):
        return self.ef.call("DeleteUser", surface=surface, user_id=user_id)

    def server_stats(self):
        return self.ef.call("GetServerStats")


class ServerTestCase(unittest.TestCase):
    """One server process per test class (killed in tearDownClass); tests use
    distinct user ids, so they do not depend on each other."""

    FLAGS = ()
    ENV = None

    @classmethod
    def setUpClass(cls):
        cls.server = harness.ServerProcess(*cls.FLAGS, env=cls.ENV)
        try:
            cls.server.start()
            cls.client = Client(cls.server.address)
        except BaseException:
            cls.server.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.client.close()
        finally:
            cls.server.close()

    def assertRpcError(self, code, field, fn, *args, **kwargs):
        """fn(...) fails with `code` and a message naming `field`."""
        with self.assertRaises(grpc.RpcError) as cm:
            fn(*args, **kwargs)
        err = cm.exception
        self.assertEqual(err.code(), code,
                         "%s: %s" % (err.code(), err.details()))
        self.assertIn(field, err.details() or "")
        return err


# --- reflection ----------------------------------------------------------


class ReflectionTest(ServerTestCase):
    def test_list_services(self):
        with grpc.insecure_channel(self.server.address) as ch, \
                rc.ReflectionClient(ch) as refl:
            services = refl.list_services()
        self.assertIn(SERVICE, services)
        self.assertIn(HEALTH, services)
        self.assertIn(rc.REFLECTION_SERVICE, services)
        self.assertEqual(len(services), len(set(services)))

    def _describe(self, refl, service):
        """What `grpcurl describe <service>` does: the declaring file, its
        dependencies, every method's request and response type."""
        pool = refl.pool_for_symbols([service])
        svc = pool.FindServiceByName(service)
        self.assertEqual(svc.full_name, service)
        self.assertTrue(svc.methods, service)
        for m in svc.methods:
            self.assertEqual(m.full_name, service + "." + m.name)
            # Every message the method uses, fields included, is resolvable.
            for msg in (m.input_type, m.output_type):
                self.assertIs(pool.FindMessageTypeByName(msg.full_name), msg)
                for f in msg.fields:
                    if f.message_type is not None:
                        pool.FindMessageTypeByName(f.message_type.full_name)
            # `grpcurl describe Service.Method` asks for the method symbol.
            decl = refl.declaring_file(m.full_name)
            self.assertIn(service, rc.file_symbols(decl))
        return svc

    def test_describe_every_service_fresh_stream(self):
        """One reflection stream per service, as separate grpcurl runs do."""
        with grpc.insecure_channel(self.server.address) as ch:
            with rc.ReflectionClient(ch) as refl:
                services = refl.list_services()
            for service in services:
                with self.subTest(service=service), \
                        rc.ReflectionClient(ch) as refl:
                    # On a fresh stream the declaring file comes first, which
                    # is what older grpcurl releases rely on.
                    first = refl.file_containing_symbol(service)[0]
                    self.assertIn(service, rc.file_symbols(first))
                    self._describe(refl, service)

    def test_describe_every_service_one_stream(self):
        """All services over one stream, as `grpcurl describe` does."""
        with grpc.insecure_channel(self.server.address) as ch, \
                rc.ReflectionClient(ch) as refl:
            described = {}
            for service in refl.list_services():
                with self.subTest(service=service):
                    described[service] = self._describe(refl, service)
        self.assertEqual({m.name for m in described[SERVICE].methods},
                         EF_METHODS)
        self.assertTrue({"Check", "Watch"} <=
                        {m.name for m in described[HEALTH].methods})
        info = described[rc.REFLECTION_SERVICE].methods_by_name[
            "ServerReflectionInfo"]
        self.assertTrue(info.client_streaming and info.server_streaming)

    def test_describe_messages_and_enum(self):
        with grpc.insecure_channel(self.server.address) as ch, \
                rc.ReflectionClient(ch) as refl:
            pool = refl.pool_for_symbols(["exposure.v1.Exposure",
                                          "exposure.v1.ResultMode"])
        exp = pool.FindMessageTypeByName("exposure.v1.Exposure")
        self.assertEqual(
            [(f.name, f.number) for f in exp.fields],
            [("user_id", 1), ("item_ids", 2), ("item_keys", 3),
             ("event_time_ms", 4)])
        mode = pool.FindEnumTypeByName("exposure.v1.ResultMode")
        self.assertEqual(mode.values_by_name["KEEP_MASK"].number, 1)

    def test_unknown_symbol_is_not_found(self):
        with grpc.insecure_channel(self.server.address) as ch, \
                rc.ReflectionClient(ch) as refl:
            with self.assertRaises(rc.ReflectionError) as cm:
                refl.file_containing_symbol("exposure.v1.NoSuchThing")
            self.assertEqual(cm.exception.code,
                             grpc.StatusCode.NOT_FOUND.value[0])
            # The stream stays usable after an error reply.
            self.assertIn(SERVICE, refl.list_services())


# --- the API, through dynamic messages ------------------------------------


class ApiTest(ServerTestCase):
    # "exact": an fp rate low enough that, for the few hundred fresh items
    # below, a false positive is a ~1e-4 event (and the hash is fixed, so the
    # outcome is deterministic), so survivors can be asserted exactly.
    FLAGS = ("--shards=8", "--surfaces=exact:fp_rate=0.000001")

    def test_health_check_dynamic(self):
        serving = self.client.health.enum_value(
            "grpc.health.v1.HealthCheckResponse.ServingStatus", "SERVING")
        resp = self.client.health.call("Check")
        self.assertEqual(resp.status, serving)
        resp = self.client.health.call("Check", service=SERVICE)
        self.assertEqual(resp.status, serving)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, "",
                            self.client.health.call, "Check",
                            service="no.such.Service")

    def test_record_many_users_times_and_expiry(self):
        c = self.client
        now = now_ms()
        resp = c.record(
            c.exposure("rec-u1", ids=range(1, 101), keys=["a", "b"]),
            c.exposure("rec-u2", ids=range(1000, 1051), t=now - 3600 * 1000),
            c.exposure("rec-u3", keys=["late"], t=now - 20 * DAY_MS),
            c.exposure("rec-u4", ids=[5, 6, 7, 8, 9], t=now - 60 * DAY_MS),
            c.exposure("rec-u1", ids=[2**64 - 1, 0], t=now - 2 * DAY_MS),
            c.exposure("rec-u5", ids=[42], t=now + 60 * 1000),  # small skew ok
            surface="exact")
        self.assertEqual(resp.items_recorded, 102 + 51 + 1 + 2 + 1)
        self.assertEqual(resp.items_expired, 5)

        for user, ids, keys in (
                ("rec-u1", list(range(1, 101)) + [2**64 - 1, 0], ["a", "b"]),
                ("rec-u2", range(1000, 1051), []),
                ("rec-u3", [], ["late"]),
                ("rec-u5", [42], [])):
            with self.subTest(user=user):
                r = c.filter(user, ids=ids, keys=keys, surface="exact")
                self.assertEqual(list(r.kept_ids), [])
                self.assertEqual(list(r.kept_keys), [])
                self.assertEqual(r.removed_count, len(list(ids)) + len(keys))
        # The expired exposure was ignored: the user does not exist.
        self.assertFalse(c.user_stats("rec-u4", surface="exact").exists)
        r = c.filter("rec-u4", ids=[5, 6, 7, 8, 9], surface="exact")
        self.assertEqual(list(r.kept_ids), [5, 6, 7, 8, 9])

    def test_filter_kept_ids_exact_survivors(self):
        c = self.client
        recorded_ids = [3 * i for i in range(1, 201)]
        recorded_keys = ["item-%d" % i for i in range(50)]
        c.record(c.exposure("kept-u1", ids=recorded_ids[:120],
                            keys=recorded_keys[:20]),
                 c.exposure("kept-u1", ids=recorded_ids[120:],
                            keys=recorded_keys[20:], t=now_ms() - 7 * DAY_MS),
                 c.exposure("kept-other", ids=range(100000, 100100)),
                 surface="exact")
        cand_ids = list(range(1, 601))  # 200 recorded (multiples of 3), 400 fresh
        # Even item-0..item-98: 25 of them are recorded. Keys "3" and "6" are
        # fresh although ids 3 and 6 are recorded: the two spaces are distinct.
        cand_keys = (["item-%d" % i for i in range(0, 100, 2)]
                     + ["3", "6", "fresh"])
        r = c.filter("kept-u1", ids=cand_ids, keys=cand_keys, surface="exact")
        want_ids = [i for i in cand_ids if i not in set(recorded_ids)]
        want_keys = [k for k in cand_keys if k not in set(recorded_keys)]
        self.assertEqual(list(r.kept_ids), want_ids)   # request order
        self.assertEqual(list(r.kept_keys), want_keys)
        self.assertEqual(r.removed_count, 200 + 25)
        self.assertEqual(r.keep_mask, b"")
        # The other user's history does not leak into this one.
        r = c.filter("kept-other", ids=recorded_ids, surface="exact")
        self.assertEqual(list(r.kept_ids), recorded_ids)

    def test_filter_default_surface_no_false_negatives(self):
        c = self.client
        recorded = list(range(10**12, 10**12 + 3000, 3))  # 1000 ids
        keys = ["k%05d" % i for i in range(0, 1000, 2)]    # 500 keys
        c.record(c.exposure("dflt-u1", ids=recorded, keys=keys))
        cand_ids = list(range(10**12, 10**12 + 3000))
        cand_keys = ["k%05d" % i for i in range(1000)]
        r = c.filter("dflt-u1", ids=cand_ids, keys=cand_keys)
        kept_ids, kept_keys = list(r.kept_ids), list(r.kept_keys)
        # Zero false negatives: no recorded item survives.
        self.assertFalse(set(kept_ids) & set(recorded))
        self.assertFalse(set(kept_keys) & set(keys))
        # Survivors are a subsequence of the candidates, in request order.
        self.assertEqual(kept_ids, [i for i in cand_ids if i in set(kept_ids)])
        self.assertEqual(kept_keys,
                         [k for k in cand_keys if k in set(kept_keys)])
        # Fresh items are removed only at about the configured 1% rate
        # (generous bound: 5% of 2,500 fresh items).
        fresh = 2000 + 500
        self.assertGreaterEqual(len(kept_ids) + len(kept_keys), fresh - 125)
        self.assertEqual(r.removed_count,
                         len(cand_ids) + len(cand_keys)
                         - len(kept_ids) - len(kept_keys))

    def test_keep_mask_bits(self):
        c = self.client
        c.record(c.exposure("mask-u1", ids=[11, 13, 15], keys=["x", "z"]),
                 surface="exact")
        # ids first, then keys; bit i LSB-first.
        ids = [11, 12, 13, 14, 15]
        keys = ["x", "y", "z"]
        r = c.filter("mask-u1", ids=ids, keys=keys, surface="exact",
                     mode=c.KEEP_MASK)
        #            11 12 13 14 15  x  y  z
        # kept:       0  1  0  1  0  0  1  0  -> 0b01001010
        self.assertEqual(r.keep_mask, bytes([0b01001010]))
        self.assertEqual(r.removed_count, 5)
        self.assertEqual(list(r.kept_ids), [])
        self.assertEqual(list(r.kept_keys), [])
        # 11 candidates: 2 bytes, padding bits 0.
        ids = [1, 2, 3, 11, 4, 5, 6, 7, 8]
        keys = ["y", "x"]
        r = c.filter("mask-u1", ids=ids, keys=keys, surface="exact",
                     mode=c.KEEP_MASK)
        want = [i not in (11, 13, 15) for i in ids] + [k == "y" for k in keys]
        self.assertEqual(len(r.keep_mask), 2)
        self.assertEqual(mask_bits(r.keep_mask, 11), want)
        self.assertEqual(r.keep_mask[1] >> 3, 0, "padding bits must be 0")
        self.assertEqual(r.removed_count, 2)
        # No candidates: empty mask.
        r = c.filter("mask-u1", surface="exact", mode=c.KEEP_MASK)
        self.assertEqual(r.keep_mask, b"")
        self.assertEqual(r.removed_count, 0)

    def test_keep_mask_agrees_with_kept_ids(self):
        c = self.client
        c.record(c.exposure("agree-u1", ids=range(0, 5000, 7),
                            keys=["s%d" % i for i in range(0, 300, 5)]))
        ids = list(range(5000))
        keys = ["s%d" % i for i in range(300)]
        kept = c.filter("agree-u1", ids=ids, keys=keys)
        masked = c.filter("agree-u1", ids=ids, keys=keys, mode=c.KEEP_MASK)
        self.assertEqual(len(masked.keep_mask), (len(ids) + len(keys) + 7) // 8)
        bits = mask_bits(masked.keep_mask, len(ids) + len(keys))
        self.assertEqual([i for i, b in zip(ids, bits) if b],
                         list(kept.kept_ids))
        self.assertEqual([k for k, b in zip(keys, bits[len(ids):]) if b],
                         list(kept.kept_keys))
        self.assertEqual(masked.removed_count, kept.removed_count)
        self.assertTrue(all(not b for i, b in zip(ids, bits) if i % 7 == 0))

    def test_get_filter_versions(self):
        c = self.client
        c.record(c.exposure("pull-u1", ids=range(1, 500), keys=["a"]))
        r1 = c.get_filter("pull-u1")
        self.assertEqual(r1.filter[:4], b"EXPF")
        self.assertEqual(struct.unpack_from("<H", r1.filter, 4)[0], 2)  # format 2
        self.assertGreater(len(r1.filter), 32)
        self.assertTrue(r1.version)
        self.assertFalse(r1.not_modified)
        # Same content, same version.
        self.assertEqual(c.get_filter("pull-u1").version, r1.version)
        r2 = c.get_filter("pull-u1", if_version=r1.version)
        self.assertTrue(r2.not_modified)
        self.assertEqual(r2.filter, b"")
        self.assertEqual(r2.version, r1.version)
        # A stale if_version gets the full filter.
        r3 = c.get_filter("pull-u1", if_version="not-a-version")
        self.assertFalse(r3.not_modified)
        self.assertEqual(r3.filter, r1.filter)
        # Recording changes the version.
        c.record(c.exposure("pull-u1", ids=[10**9]))
        r4 = c.get_filter("pull-u1", if_version=r1.version)
        self.assertFalse(r4.not_modified)
        self.assertEqual(r4.filter[:4], b"EXPF")
        self.assertNotEqual(r4.version, r1.version)
        self.assertNotEqual(r4.filter, r1.filter)
        self.assertTrue(c.get_filter("pull-u1",
                                     if_version=r4.version).not_modified)

    def test_unknown_user(self):
        c = self.client
        for surface in ("", "exact", "never-written"):
            with self.subTest(surface=surface):
                r = c.filter("nobody", ids=[1, 2, 3], keys=["a"],
                             surface=surface)
                self.assertEqual(list(r.kept_ids), [1, 2, 3])
                self.assertEqual(list(r.kept_keys), ["a"])
                self.assertEqual(r.removed_count, 0)
                m = c.filter("nobody", ids=[1, 2, 3], keys=["a"],
                             surface=surface, mode=c.KEEP_MASK)
                self.assertEqual(m.keep_mask, b"\x0f")
                g = c.get_filter("nobody", surface=surface)
                self.assertEqual(g.filter[:4], b"EXPF")
                self.assertEqual(struct.unpack_from("<H", g.filter, 4)[0], 2)
                self.assertTrue(g.version)
                self.assertTrue(c.get_filter(
                    "nobody", surface=surface,
                    if_version=g.version).not_modified)
                s = c.user_stats("nobody", surface=surface)
                self.assertFalse(s.exists)
                self.assertEqual((s.items, s.slices), (0, 0))
                self.assertFalse(c.delete("nobody", surface=surface).existed)
        # Reads never create a surface.
        names = [s.surface for s in c.server_stats().surface_stats]
        self.assertNotIn("never-written", names)

    def test_user_stats(self):
        c = self.client
        now = now_ms()
        c.record(c.exposure("stats-u1", ids=range(300)),
                 c.exposure("stats-u1", keys=["old"], t=now - 20 * DAY_MS))
        s = c.user_stats("stats-u1")
        self.assertTrue(s.exists)
        self.assertGreaterEqual(s.items, 250)   # approximate count
        self.assertLessEqual(s.items, 350)
        self.assertGreater(s.bytes, 0)
        self.assertGreaterEqual(s.slices, 2)    # now and 20 days ago
        self.assertGreater(s.segments, 0)
        self.assertGreater(s.estimated_fp_rate, 0)
        self.assertLess(s.estimated_fp_rate, 0.5)
        self.assertLessEqual(s.oldest_exposure_ms, now - 20 * DAY_MS + 1000)
        self.assertGreaterEqual(s.newest_exposure_ms, now - 1000)
        self.assertGreater(s.expires_at_ms, now)
        self.assertEqual(len(s.slice_stats), s.slices)
        self.assertEqual(sum(x.items for x in s.slice_stats), s.items)
        for x in s.slice_stats:
            self.assertLess(x.start_ms, x.end_ms)
            self.assertGreater(x.bytes, 0)
        # Users are per surface.
        self.assertFalse(c.user_stats("stats-u1", surface="exact").exists)

    def test_delete_user(self):
        c = self.client
        c.record(c.exposure("del-u1", ids=[1, 2, 3], keys=["a"]),
                 c.exposure("del-u2", ids=[1, 2, 3]))
        self.assertEqual(c.filter("del-u1", ids=[1, 2, 3, 4]).removed_count, 3)
        self.assertTrue(c.delete("del-u1").existed)
        self.assertFalse(c.delete("del-u1").existed)
        r = c.filter("del-u1", ids=[1, 2, 3, 4], keys=["a"])
        self.assertEqual(list(r.kept_ids), [1, 2, 3, 4])
        self.assertEqual(list(r.kept_keys), ["a"])
        self.assertFalse(c.user_stats("del-u1").exists)
        # Other users keep their history.
        self.assertEqual(c.filter("del-u2", ids=[1, 2, 3]).removed_count, 3)
        # Recording again after a delete starts a fresh history.
        c.record(c.exposure("del-u1", ids=[4]))
        r = c.filter("del-u1", ids=[1, 2, 3, 4], surface="")
        self.assertNotIn(4, list(r.kept_ids))

    def test_server_stats(self):
        c = self.client
        before = c.server_stats()
        self.assertEqual(before.shards, 8)
        self.assertEqual([s.shard for s in before.shard_stats], list(range(8)))
        c.record(c.exposure("srv-u1", ids=range(10)),
                 c.exposure("srv-u2", keys=["a", "b"]),
                 c.exposure("srv-u3", ids=[1], t=now_ms() - 90 * DAY_MS),
                 surface="exact")
        r = c.filter("srv-u1", ids=range(20), surface="exact")
        after = c.server_stats()
        self.assertEqual(after.items_recorded - before.items_recorded, 12)
        self.assertEqual(after.items_expired - before.items_expired, 1)
        self.assertEqual(after.candidates_checked - before.candidates_checked,
                         20)
        self.assertEqual(after.candidates_removed - before.candidates_removed,
                         r.removed_count)
        self.assertGreaterEqual(after.users, before.users + 2)
        self.assertEqual(sum(s.users for s in after.shard_stats), after.users)
        self.assertEqual(sum(s.bytes for s in after.shard_stats), after.bytes)
        self.assertEqual(sum(s.users for s in after.surface_stats),
                         after.users)
        self.assertEqual(sum(s.bytes for s in after.surface_stats),
                         after.bytes)
        by_name = {s.surface: s for s in after.surface_stats}
        self.assertAlmostEqual(by_name["exact"].false_positive_rate, 1e-6)
        self.assertEqual(by_name["exact"].retention_ms, 30 * DAY_MS)
        self.assertEqual(by_name["exact"].slice_span_ms, 5 * DAY_MS)
        self.assertGreaterEqual(after.uptime_ms, before.uptime_ms)


# --- errors ----------------------------------------------------------------


class ValidationTest(ServerTestCase):
    def test_empty_user_id(self):
        c = self.client
        for name, fn in (("FilterRecalled", lambda: c.filter("", ids=[1])),
                         ("GetFilter", lambda: c.get_filter("")),
                         ("GetUserStats", lambda: c.user_stats("")),
                         ("DeleteUser", lambda: c.delete(""))):
            with self.subTest(rpc=name):
                self.assertRpcError(INVALID, "user_id", fn)
        self.assertRpcError(INVALID, "exposures[0].user_id", c.record,
                            c.exposure("", ids=[1]))

    def test_user_id_length(self):
        c = self.client
        ok = "u" * 256
        c.record(c.exposure(ok, ids=[1]))
        self.assertEqual(c.filter(ok, ids=[1]).removed_count, 1)
        long_id = "u" * 257
        err = self.assertRpcError(INVALID, "user_id", c.filter, long_id,
                                  ids=[1])
        self.assertIn("257", err.details())
        self.assertRpcError(INVALID, "user_id", c.get_filter, long_id)
        self.assertRpcError(INVALID, "user_id", c.user_stats, long_id)
        self.assertRpcError(INVALID, "user_id", c.delete, long_id)
        self.assertRpcError(INVALID, "exposures[1].user_id", c.record,
                            c.exposure("ok", ids=[1]),
                            c.exposure(long_id, ids=[1]))
        # The limit is in bytes, not characters.
        self.assertRpcError(INVALID, "user_id", c.filter, "\u00e9" * 129)

    def test_bad_surface(self):
        c = self.client
        bad = "Home Feed!"
        for name, fn in (
                ("RecordExposure",
                 lambda: c.record(c.exposure("u", ids=[1]), surface=bad)),
                ("FilterRecalled", lambda: c.filter("u", surface=bad)),
                ("GetFilter", lambda: c.get_filter("u", surface=bad)),
                ("GetUserStats", lambda: c.user_stats("u", surface=bad)),
                ("DeleteUser", lambda: c.delete("u", surface=bad)),
                ("RecordExposure/65 bytes",
                 lambda: c.record(c.exposure("u", ids=[1]),
                                  surface="s" * 65))):
            with self.subTest(rpc=name):
                self.assertRpcError(INVALID, "surface", fn)
        names = [s.surface for s in c.server_stats().surface_stats]
        self.assertNotIn(bad, names)

    def test_event_time(self):
        c = self.client
        err = self.assertRpcError(INVALID, "exposures[0].event_time_ms",
                                  c.record, c.exposure("t-u1", ids=[1], t=-1))
        self.assertIn("negative", err.details())
        self.assertRpcError(INVALID, "exposures[0].event_time_ms", c.record,
                            c.exposure("t-u1", ids=[1], t=now_ms() + DAY_MS))
        self.assertRpcError(INVALID, "exposures[0].event_time_ms", c.record,
                            c.exposure("t-u1", ids=[1], t=2**63 - 1))
        self.assertFalse(c.user_stats("t-u1").exists)

    def test_empty_keys(self):
        c = self.client
        self.assertRpcError(INVALID, "exposures[0].item_keys[1]", c.record,
                            c.exposure("k-u1", keys=["a", ""]))
        self.assertRpcError(INVALID, "exposures[1].item_keys[0]", c.record,
                            c.exposure("k-u1", keys=["a"]),
                            c.exposure("k-u2", keys=[""]))
        self.assertRpcError(INVALID, "candidate_keys[2]", c.filter, "k-u1",
                            keys=["a", "b", ""])
        self.assertRpcError(INVALID, "item_keys[0]", c.record,
                            c.exposure("k-u1", keys=["x" * 257]))
        self.assertFalse(c.user_stats("k-u1").exists)
        self.assertFalse(c.user_stats("k-u2").exists)

    def test_rejected_record_applies_nothing(self):
        c = self.client
        cases = (
            ("empty user", c.exposure("", ids=[1])),
            ("negative time", c.exposure("atom-x", ids=[1], t=-5)),
            ("future time", c.exposure("atom-x", ids=[1],
                                       t=now_ms() + DAY_MS)),
            ("empty key", c.exposure("atom-x", keys=[""])),
        )
        for i, (name, bad) in enumerate(cases):
            with self.subTest(case=name):
                user = "atom-u%d" % i
                good = c.exposure(user, ids=[1, 2, 3], keys=["a", "b"])
                self.assertRpcError(INVALID, "exposures[1]", c.record, good,
                                    bad)
                r = c.filter(user, ids=[1, 2, 3], keys=["a", "b"])
                self.assertEqual(list(r.kept_ids), [1, 2, 3])
                self.assertEqual(list(r.kept_keys), ["a", "b"])
                self.assertFalse(c.user_stats(user).exists)
                self.assertFalse(c.user_stats("atom-x").exists)

    def test_bad_mode_and_if_version(self):
        c = self.client
        req = c.ef.request("FilterRecalled", user_id="u", candidate_ids=[1])
        req.mode = 7  # proto3 enums are open: unknown values go on the wire
        self.assertRpcError(INVALID, "mode", c.ef.call, "FilterRecalled", req)
        self.assertRpcError(INVALID, "if_version", c.get_filter, "u",
                            if_version="v" * 65)

    def test_server_survives_bad_input(self):
        # After all of the above, the server still answers.
        c = self.client
        c.record(c.exposure("alive", ids=[1]))
        self.assertEqual(c.filter("alive", ids=[1, 2]).removed_count, 1)


class LimitsTest(ServerTestCase):
    FLAGS = ("--max_candidates_per_request=10", "--max_items_per_request=10",
             "--max_exposures_per_request=3", "--max_surfaces=2")

    def test_candidates_limit(self):
        c = self.client
        self.assertEqual(c.filter("lim-u", ids=range(10)).removed_count, 0)
        self.assertEqual(
            c.filter("lim-u", ids=range(5), keys=list("abcde")).removed_count,
            0)
        self.assertRpcError(INVALID, "candidate", c.filter, "lim-u",
                            ids=range(11))
        self.assertRpcError(INVALID, "candidate", c.filter, "lim-u",
                            keys=[str(i) for i in range(11)])
        self.assertRpcError(INVALID, "candidate", c.filter, "lim-u",
                            ids=range(6), keys=list("abcde"),
                            mode=c.KEEP_MASK)

    def test_items_limit(self):
        c = self.client
        self.assertEqual(c.record(c.exposure("lim-a", ids=range(6)),
                                  c.exposure("lim-b", keys=list("abcd")))
                         .items_recorded, 10)
        self.assertRpcError(INVALID, "exposures", c.record,
                            c.exposure("lim-c", ids=range(11)))
        self.assertRpcError(INVALID, "exposures", c.record,
                            c.exposure("lim-d", ids=range(6)),
                            c.exposure("lim-e", keys=list("abcde")))
        for user in ("lim-c", "lim-d", "lim-e"):
            self.assertFalse(c.user_stats(user).exists, user)

    def test_exposures_limit(self):
        c = self.client
        self.assertRpcError(INVALID, "exposures", c.record,
                            *[c.exposure("lim-x%d" % i, ids=[i])
                              for i in range(4)])
        self.assertFalse(c.user_stats("lim-x0").exists)

    def test_surfaces_limit(self):
        c = self.client
        # The default surface "" counts too once written (other tests here
        # may have done so): fill up to --max_surfaces=2 whatever exists.
        held = [s.surface for s in c.server_stats().surface_stats]
        for name in ("one", "two")[:2 - len(held)]:
            c.record(c.exposure("s", ids=[1]), surface=name)
        held = [s.surface for s in c.server_stats().surface_stats]
        self.assertEqual(len(held), 2, held)
        err = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  "surface", c.record, c.exposure("s", ids=[1]),
                                  surface="three")
        self.assertIn("max_surfaces", err.details())
        self.assertNotIn("three", [s.surface for s in
                                   c.server_stats().surface_stats])
        # Existing surfaces keep working; reads of unknown ones are fine.
        c.record(c.exposure("s", ids=[2]), surface=held[-1])
        self.assertEqual(c.filter("s", ids=[1], surface="three").removed_count,
                         0)


# --- process lifecycle -------------------------------------------------------


class LifecycleTest(unittest.TestCase):
    def _exits_cleanly_on(self, sig, *flags, before_signal=None,
                          timeout=120):
        server = harness.ServerProcess(*flags)
        try:
            server.start()
            client = Client(server.address)
            try:
                client.record(client.exposure("sig-u", ids=[1, 2]))
                self.assertEqual(client.filter("sig-u", ids=[1]).removed_count,
                                 1)
                state = before_signal(client) if before_signal else None
                server.signal(sig)
                # With nothing in flight the server must not wait for its
                # shutdown grace; it normally exits in ~0.1 s.
                code = server.wait_exit(timeout=timeout)
            finally:
                client.close()
            self.assertEqual(code, 0, server.log())
            self.assertIn("shutdown complete", server.log())
            return state
        finally:
            server.close()

    # A grace (600 s) far beyond the wait (120 s): a server that waited for
    # it with nothing in flight fails on any machine, one that does not
    # passes on any machine, however slow: no speed in verdicts.
    def test_sigterm_exits_zero(self):
        self._exits_cleanly_on(signal.SIGTERM, "--shutdown_grace=600s")

    def test_sigint_exits_zero(self):
        self._exits_cleanly_on(signal.SIGINT, "--shutdown_grace=600s")

    def test_sigterm_with_open_stream_exits_after_grace(self):
        """An in-flight RPC (an idle reflection stream) is cancelled once the
        shutdown grace runs out; the process still exits 0."""
        holder = {}

        def open_stream(client):
            holder["refl"] = rc.ReflectionClient(client.channel, timeout=60)
            holder["refl"].list_services()

        try:
            self._exits_cleanly_on(signal.SIGTERM, "--shutdown_grace=1s",
                                   before_signal=open_stream, timeout=20)
        finally:
            if "refl" in holder:
                holder["refl"].close()

    def test_env_override_max_id_bytes(self):
        with harness.ServerProcess(
                env={"EXPOSURE_FILTER_MAX_ID_BYTES": "8"}) as server:
            client = Client(server.address)
            try:
                client.record(client.exposure("12345678", ids=[1]))
                with self.assertRaises(grpc.RpcError) as cm:
                    client.filter("123456789", ids=[1])
                self.assertEqual(cm.exception.code(), INVALID)
                self.assertIn("user_id", cm.exception.details())
                self.assertIn("8", cm.exception.details())
            finally:
                client.close()

    def test_command_line_beats_environment(self):
        with harness.ServerProcess(
                "--max_id_bytes=16",
                env={"EXPOSURE_FILTER_MAX_ID_BYTES": "8"}) as server:
            client = Client(server.address)
            try:
                client.filter("123456789", ids=[1])
                with self.assertRaises(grpc.RpcError) as cm:
                    client.filter("x" * 17, ids=[1])
                self.assertEqual(cm.exception.code(), INVALID)
            finally:
                client.close()

    def assertFailedCleanly(self, code, out):
        """Non-zero exit status, not death by a signal (e.g. SIGSEGV)."""
        self.assertGreater(code, 0, "exit status %d\n%s" % (code, out))

    def test_bad_env_value_fails_startup(self):
        code, out = harness.run_to_exit(env={"EXPOSURE_FILTER_SHARDS": "abc"})
        self.assertFailedCleanly(code, out)
        self.assertIn("EXPOSURE_FILTER_SHARDS", out)

    def test_bad_flag_value_fails_startup(self):
        for flags, word in ((("--shards=3",), "shards"),
                            (("--max_candidates_per_request=0",),
                             "max_candidates_per_request"),
                            (("--surfaces=Bad Name:fp_rate=0.1",), "surface"),
                            (("--surfaces=video:fp_rate=2",), "fp_rate"),
                            (("--log_level=loud",), "log_level")):
            with self.subTest(flags=flags):
                code, out = harness.run_to_exit(*flags)
                self.assertFailedCleanly(code, out)
                self.assertIn(word, out)

    def test_port_in_use_fails_startup(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            address = "127.0.0.1:%d" % taken.getsockname()[1]
            code, out = harness.run_to_exit("--listen=" + address)
        self.assertFailedCleanly(code, out)
        self.assertIn("cannot listen on " + address, out)


if __name__ == "__main__":
    unittest.main()
