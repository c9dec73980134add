"""The Python partitioner against Kafka's own murmur2 test vectors and the
960 vectors the C++ partitioner and librdkafka are pinned to
(tests/testdata/partitioning/murmur2_vectors.tsv, checked by
cluster_partitioning_vectors_test); and RoutingClient's split and diagnosis
over scripted replicas. From clients/python/:
    /usr/bin/python3 -m unittest -v tests.test_partitioning
"""

import os
import unittest

import grpc

from exposure_filter.partitioning import (murmur2, owners_of_partition,
                                          owners_of_user, partition_for_key,
                                          partitions_of_replica,
                                          replica_for_user,
                                          statefulset_replica_addresses)

TESTDATA = os.environ.get(
    "EF_TESTDATA_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests",
                 "testdata"))


class Murmur2Test(unittest.TestCase):

    def test_kafka_utils_test_vectors(self):
        # org.apache.kafka.common.utils.UtilsTest.testMurmur2
        cases = {
            "21": -973932308,
            "foobar": -790332482,
            "a-little-bit-long-string": -985981536,
            "a-little-bit-longer-string": -1486304829,
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
            "abc": 479470107,
        }
        for key, want in cases.items():
            self.assertEqual(murmur2(key), want, key)

    def test_sign_bit_is_masked_not_negated(self):
        self.assertEqual(partition_for_key("21", 7), 1173551340 % 7)

    def test_agrees_with_the_cpp_vectors(self):
        path = os.path.join(TESTDATA, "partitioning", "murmur2_vectors.tsv")
        checked = 0
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                key_hex, m, p12, p1000 = line.rstrip("\n").split("\t")
                key = b"" if key_hex == "-" else bytes.fromhex(key_hex)
                self.assertEqual(murmur2(key), int(m), key_hex)
                self.assertEqual(partition_for_key(key, 12), int(p12), key_hex)
                self.assertEqual(partition_for_key(key, 1000), int(p1000),
                                 key_hex)
                checked += 1
        self.assertEqual(checked, 960)

    def test_replica_is_partition_mod_replicas(self):
        for i in range(200):
            user = "user-%d" % i
            self.assertEqual(replica_for_user(user, 12, 5),
                             partition_for_key(user, 12) % 5)
        with self.assertRaises(ValueError):
            replica_for_user("u", 2, 3)

    def test_agrees_with_the_cpp_placement_vectors(self):
        # Replication: the same file cluster_partitioning_vectors_test
        # pins the C++ OwnersOfPartition / PartitionsOfReplica to.
        path = os.path.join(TESTDATA, "partitioning", "placement_vectors.tsv")
        owners_checked = owned_checked = 0
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                f = line.rstrip("\n").split("\t")
                if f[0] == "owners":
                    n, r, p = int(f[1]), int(f[2]), int(f[3])
                    want = [int(o) for o in f[4].split(",")]
                    self.assertEqual(owners_of_partition(p, n, r), want, line)
                    owners_checked += 1
                else:
                    self.assertEqual(f[0], "owned", line)
                    p, n, r, o = (int(x) for x in f[1:5])
                    want = [] if f[5] == "-" else [int(x) for x in
                                                   f[5].split(",")]
                    self.assertEqual(partitions_of_replica(o, p, n, r), want,
                                     line)
                    owned_checked += 1
        self.assertEqual((owners_checked, owned_checked), (526, 166))

    def test_owner_zero_is_the_unreplicated_owner(self):
        for i in range(200):
            user = "user-%d" % i
            owners = owners_of_user(user, 12, 3, 2)
            self.assertEqual(owners[0], replica_for_user(user, 12, 3))
            self.assertEqual(len(set(owners)), 2)
        with self.assertRaises(ValueError):
            owners_of_user("u", 12, 3, 4)
        with self.assertRaises(ValueError):
            partitions_of_replica(0, 12, 3, 0)

    def test_owner_hint_carries_the_replication_factor(self):
        # A replicated server appends replication_factor=R to
        # x-exposure-owner; the Python decoder keeps it (a missing key means 1).
        from exposure_filter.client import owner_hint
        hint = owner_hint(_Refusal([(
            "x-exposure-owner",
            "ordinal=2;partition=5;partitions=12;replicas=3;self=1;"
            "replication_factor=2;address=ef-2:1")]))
        self.assertEqual(hint["replication_factor"], 2)
        self.assertEqual(owners_of_partition(hint["partition"],
                                             hint["replicas"],
                                             hint["replication_factor"]),
                         [2, 0])

    def test_statefulset_addresses(self):
        self.assertEqual(
            statefulset_replica_addresses("ef", "ef-headless", 50051, 2),
            ["ef-0.ef-headless:50051", "ef-1.ef-headless:50051"])


class _Refusal(grpc.RpcError):
    """What grpcio raises for a partitioned replica's refusal."""

    def __init__(self, metadata):
        super().__init__()
        self._metadata = metadata

    def code(self):
        return grpc.StatusCode.FAILED_PRECONDITION

    def details(self):
        return "user_id: not mine"

    def trailing_metadata(self):
        return self._metadata


class _ScriptedReplica:
    """A replica with the server's ownership rule under (P, N, self)."""

    def __init__(self, partitions, replicas, ordinal):
        self.p, self.n, self.ordinal = partitions, replicas, ordinal
        self.recorded = []

    def _check(self, user):
        owner = replica_for_user(user, self.p, self.n)
        if owner != self.ordinal:
            raise _Refusal([("x-exposure-owner",
                             "ordinal=%d;partition=%d;partitions=%d;"
                             "replicas=%d;self=%d" % (
                                 owner, partition_for_key(user, self.p),
                                 self.p, self.n, self.ordinal))])

    def record_exposure(self, request):
        for e in request.exposures:
            self._check(e.user_id)
        self.recorded.extend(e.user_id for e in request.exposures)
        return "ok"

    def filter_recalled(self, request):
        self._check(request.user_id)
        return "kept"

    def future(self, name, request, timeout_s):
        """The client's future() over the methods above: already done."""
        method = {"RecordExposure": self.record_exposure,
                  "FilterRecalled": self.filter_recalled}[name]
        return _DoneFuture(method, request)


class _DoneFuture:
    """A finished call in grpc.Future's shape (what RoutingClient uses)."""

    def __init__(self, method, request):
        self._result = self._error = None
        try:
            self._result = method(request)
        except grpc.RpcError as e:
            self._error = e

    def result(self):
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self):
        return self._error

    def cancel(self):
        return False

    def add_done_callback(self, fn):
        fn(self)


class RoutingClientTest(unittest.TestCase):

    def test_record_is_split_by_owner_and_calls_reach_the_owner(self):
        from exposure.v1 import exposure_filter_pb2 as pb
        from exposure_filter.client import RoutingClient
        replicas = [_ScriptedReplica(12, 3, r) for r in range(3)]
        router = RoutingClient(replicas, partitions=12)
        req = pb.RecordExposureRequest(surface="homefeed")
        users = ["user:%d" % i for i in range(90)]
        for u in users:
            req.exposures.add(user_id=u, item_ids=[1])
        results = router.record_exposure(req)
        self.assertEqual([r for r, _, _ in results], [0, 1, 2])
        for replica, indices, outcome in results:
            self.assertEqual(outcome, "ok")
            self.assertEqual(replicas[replica].recorded,
                             [users[i] for i in indices])
        for u in users:
            self.assertEqual(router.filter_recalled(
                pb.FilterRecalledRequest(user_id=u)), "kept")

    def test_misconfigured_partitions_and_order_are_diagnosed(self):
        from exposure.v1 import exposure_filter_pb2 as pb
        from exposure_filter.client import RoutingClient, RoutingError
        replicas = [_ScriptedReplica(12, 3, r) for r in range(3)]
        wrong_p = RoutingClient(replicas, partitions=8)
        swapped = RoutingClient([replicas[1], replicas[0], replicas[2]], 12)
        saw_p = saw_order = False
        for i in range(100):
            req = pb.FilterRecalledRequest(user_id="user:%d" % i)
            try:
                wrong_p.filter_recalled(req)
            except RoutingError as e:
                self.assertIn("partitions=8 replicas=3 but replica", str(e))
                self.assertIn("--partitions=12 --replicas=3", str(e))
                saw_p = True
            try:
                swapped.filter_recalled(req)
            except RoutingError as e:
                self.assertIn("list the addresses in ordinal order", str(e))
                saw_order = True
        self.assertTrue(saw_p and saw_order)


if __name__ == "__main__":
    unittest.main()
