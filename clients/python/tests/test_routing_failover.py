"""RoutingClient failover and hedging against three scripted
gRPC replicas in this process (P = 12, N = 3, R = 2): a user whose owner 0 is
replica 0 has owners [0, 1]. One owner answering UNAVAILABLE, one hanging
past the per-try timeout, one unreachable port: the call succeeds on the
other owner inside its deadline; hedging sends to owner 1 after the delay;
both down raises UNAVAILABLE naming both; R = 1 is unchanged; the last
owner's try allows a lagging copy to answer; a FilterCache over the router
fails over, revalidates at the next owner, carries min_offsets on every
try and counts lagging answers. No wall-clock
asserts: which replica was called, and the codes, say what happened.
From clients/python/ (with build/python on PYTHONPATH):
    /usr/bin/python3 -m unittest -v tests.test_routing_failover
"""

import struct
import threading
import unittest
from concurrent import futures

import grpc
import xxhash

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.client import (SERVICE, ExposureFilterClient,
                                    FilterCache, OwnersFailed, RoutingClient,
                                    RoutingError, connect, written_offsets)
from exposure_filter.partitioning import replica_for_user

PARTITIONS, REPLICAS = 12, 3



def _empty_filter():
    """An empty format-2 filter (no slices; fp 1%, one-hour slices), as any
    copy encodes a user it holds nothing for, and its version."""
    header = struct.pack("<4sHBBdq", b"EXPF", 2, 1, 0, 0.01, 3_600_000)
    checksum = xxhash.xxh3_64_intdigest(header)
    return header + struct.pack("<Q", checksum), "%016x" % checksum


EMPTY_FILTER, EMPTY_VERSION = _empty_filter()


class _Replica:
    """A scripted replica: mode "ok", "unavailable", "invalid", "hang"
    (until released or cancelled), "hint" (FAILED_PRECONDITION carrying
    `hint` as the owner trailer) or "lagging" (UNAVAILABLE unless the read
    allows lagging, then an answer saying it lagged). Counts every call."""

    def __init__(self):
        self.mode = "ok"
        self.hint = ""
        self.calls = 0
        self.min_offsets = []  # per FilterRecalled call, as received
        self.allow_lagging = []  # per FilterRecalled call, as received
        self.pulls = []  # per GetFilter call: (if_version, min_offsets,
        #                  allow_lagging) as received
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "FilterRecalled": grpc.unary_unary_rpc_method_handler(
                self._filter_recalled,
                request_deserializer=pb.FilterRecalledRequest.FromString,
                response_serializer=pb.FilterRecalledResponse.
                SerializeToString),
            "GetFilter": grpc.unary_unary_rpc_method_handler(
                self._get_filter,
                request_deserializer=pb.GetFilterRequest.FromString,
                response_serializer=pb.GetFilterResponse.SerializeToString),
            "RecordExposure": grpc.unary_unary_rpc_method_handler(
                self._record_exposure,
                request_deserializer=pb.RecordExposureRequest.FromString,
                response_serializer=pb.RecordExposureResponse.
                SerializeToString),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _enter(self, context):
        with self._lock:
            self.calls += 1
        if self.mode == "hang":
            while not self.release.wait(0.005):
                if not context.is_active():
                    context.abort(grpc.StatusCode.CANCELLED, "held")
        if self.mode == "unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted")
        if self.mode == "cancelled":
            context.abort(grpc.StatusCode.CANCELLED, "scripted")
        if self.mode == "invalid":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "scripted")
        if self.mode == "hint":
            context.set_trailing_metadata((("x-exposure-owner", self.hint),))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not mine")

    def _filter_recalled(self, request, context):
        self.min_offsets.append(dict(request.min_offsets))
        self.allow_lagging.append(request.allow_lagging)
        if self.mode == "behind" and request.min_offsets:
            # A copy that has not applied the offsets.
            with self._lock:
                self.calls += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "min_offsets: behind")
        if self.mode == "lagging":
            with self._lock:
                self.calls += 1
            if not request.allow_lagging:
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              "this copy is lagging 1.3s behind")
            return pb.FilterRecalledResponse(
                kept_ids=request.candidate_ids,
                staleness=pb.ReadStaleness(lag_ms=1300, partition=4,
                                           lagging=True))
        self._enter(context)
        return pb.FilterRecalledResponse(kept_ids=request.candidate_ids)

    def _get_filter(self, request, context):
        """Every copy holds the same (empty) filter: "not modified" to its
        version, whichever copy it was pulled from."""
        self.pulls.append((request.if_version, dict(request.min_offsets),
                           request.allow_lagging))
        staleness = pb.ReadStaleness(lag_ms=20, partition=4)
        if self.mode == "lagging":
            with self._lock:
                self.calls += 1
            if not request.allow_lagging:
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              "this copy is lagging 1.3s behind")
            staleness = pb.ReadStaleness(lag_ms=1300, partition=4,
                                         lagging=True)
        else:
            self._enter(context)
        if request.if_version == EMPTY_VERSION:
            return pb.GetFilterResponse(version=EMPTY_VERSION,
                                        not_modified=True,
                                        staleness=staleness)
        return pb.GetFilterResponse(filter=EMPTY_FILTER, version=EMPTY_VERSION,
                                    staleness=staleness)

    def _record_exposure(self, request, context):
        self._enter(context)
        return pb.RecordExposureResponse(items_recorded=1,
                                         written_offsets={3: 41, 5: 7})


class RoutingFailoverTest(unittest.TestCase):

    def setUp(self):
        self.replicas = [_Replica() for _ in range(REPLICAS)]
        self.addresses = ["127.0.0.1:%d" % r.port for r in self.replicas]
        self.user = next("user:%d" % i for i in range(1000)
                         if replica_for_user("user:%d" % i, PARTITIONS,
                                             REPLICAS) == 0)
        self.channels = []

    def tearDown(self):
        for r in self.replicas:
            r.release.set()
            r.server.stop(None)
        for c in self.channels:
            c.close()

    def router(self, replication_factor=2, timeout_s=30.0, **options):
        # One try per channel call (no gRPC retries); a generous deadline.
        clients = []
        for a in self.addresses:
            channel = connect(a, max_attempts=1)
            self.channels.append(channel)
            clients.append(ExposureFilterClient(channel, timeout_s=timeout_s))
        return RoutingClient(clients, PARTITIONS,
                             replication_factor=replication_factor, **options)

    def recall(self):
        return pb.FilterRecalledRequest(surface="homefeed",
                                        user_id=self.user, candidate_ids=[7])

    def calls(self):
        return [r.calls for r in self.replicas]

    def test_owners_are_the_partition_and_the_next_ordinals(self):
        self.assertEqual(self.router().owners_for_user(self.user), [0, 1])

    def test_healthy_owner_zero_is_the_only_one_called(self):
        router = self.router()
        for _ in range(3):
            self.assertEqual(list(router.filter_recalled(self.recall())
                                  .kept_ids), [7])
        self.assertEqual(self.calls(), [3, 0, 0])

    def test_unavailable_owner_fails_over(self):
        self.replicas[0].mode = "unavailable"
        router = self.router()
        self.assertEqual(list(router.filter_recalled(self.recall()).kept_ids),
                         [7])
        self.assertEqual(self.calls(), [1, 1, 0])
        self.assertEqual(router.stats(), {
            "failovers": 1, "hedges": 0, "placement_updates": 0,
            "lagging_answers": 0, "replica_errors": [1, 0, 0]})

    def test_cancelled_by_the_owner_fails_over(self):
        # What a server shutting down answers a call that just arrived.
        self.replicas[0].mode = "cancelled"
        router = self.router()
        self.assertEqual(list(router.filter_recalled(self.recall()).kept_ids),
                         [7])
        self.assertEqual(self.calls(), [1, 1, 0])
        self.assertEqual(router.stats()["failovers"], 1)

    def test_hanging_owner_is_left_after_the_per_try_timeout(self):
        self.replicas[0].mode = "hang"
        router = self.router(per_try_timeout_s=0.2)
        self.assertEqual(list(router.filter_recalled(self.recall()).kept_ids),
                         [7])
        self.assertEqual(self.calls(), [1, 1, 0])
        self.assertEqual(router.stats()["failovers"], 1)

    def test_unreachable_owner_fails_over(self):
        self.replicas[0].server.stop(None)  # nothing listens on its port
        router = self.router()
        self.assertEqual(list(router.filter_recalled(self.recall()).kept_ids),
                         [7])
        self.assertEqual(self.replicas[1].calls, 1)
        self.assertEqual(router.stats()["replica_errors"], [1, 0, 0])

    def test_writes_fail_over(self):
        self.replicas[0].mode = "unavailable"
        router = self.router()
        req = pb.RecordExposureRequest(surface="homefeed")
        req.exposures.add(user_id=self.user, item_ids=[7])
        [(replica, indices, outcome)] = router.record_exposure(req)
        self.assertEqual((replica, indices), (0, [0]))
        self.assertEqual(outcome.items_recorded, 1)
        self.assertEqual(self.calls(), [1, 1, 0])

    def test_both_owners_down_is_unavailable_naming_them(self):
        self.replicas[0].mode = self.replicas[1].mode = "unavailable"
        router = self.router()
        with self.assertRaises(OwnersFailed) as caught:
            router.filter_recalled(self.recall())
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        message = caught.exception.details()
        self.assertIn("every owner failed (2 of 2 tried)", message)
        self.assertIn("replica 0: UNAVAILABLE: scripted", message)
        self.assertIn("replica 1: UNAVAILABLE: scripted", message)
        self.assertEqual(self.replicas[2].calls, 0)
        # Owner 0 was asked once more as a last owner (it might only have
        # been lagging) and failed again.
        self.assertEqual(self.calls(), [2, 1, 0])

    def test_a_lagging_owner_answers_when_the_last_owner_is_down(self):
        self.replicas[0].mode = "lagging"
        self.replicas[1].mode = "unavailable"
        router = self.router()
        response = router.filter_recalled(self.recall())
        self.assertEqual(list(response.kept_ids), [7])
        self.assertTrue(response.staleness.lagging)
        self.assertEqual(self.replicas[0].allow_lagging, [False, True])
        self.assertEqual(self.calls(), [2, 1, 0])
        self.assertEqual(router.stats()["lagging_answers"], 1)
        self.assertEqual(router.stats()["failovers"], 2)

    def test_a_write_is_not_retried_as_a_last_resort(self):
        self.replicas[0].mode = self.replicas[1].mode = "unavailable"
        router = self.router()
        req = pb.RecordExposureRequest(surface="homefeed")
        req.exposures.add(user_id=self.user, item_ids=[7])
        outcomes = router.record_exposure(req)
        self.assertEqual(self.calls(), [1, 1, 0])
        self.assertEqual(len(outcomes), 1)

    def test_the_deadline_is_not_extended_by_failover(self):
        # No per-try timeout: owner 0 takes the whole deadline; owner 1 must
        # not be tried after it.
        self.replicas[0].mode = "hang"
        router = self.router(timeout_s=0.3)
        with self.assertRaises(grpc.RpcError) as caught:
            router.filter_recalled(self.recall())
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn("reached before owners 1 were tried: replica 0: "
                      "DEADLINE_EXCEEDED", caught.exception.details())
        self.assertEqual(self.replicas[1].calls, 0)

    def test_replication_factor_one_is_unchanged(self):
        self.replicas[0].mode = "unavailable"
        router = self.router(replication_factor=1)
        with self.assertRaises(grpc.RpcError) as caught:
            router.filter_recalled(self.recall())
        self.assertNotIsInstance(caught.exception, OwnersFailed)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(caught.exception.details(), "scripted")
        self.assertEqual(self.calls(), [1, 0, 0])

    def test_other_codes_are_not_retried_on_another_owner(self):
        self.replicas[0].mode = "invalid"
        router = self.router()
        with self.assertRaises(grpc.RpcError) as caught:
            router.filter_recalled(self.recall())
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(self.calls(), [1, 0, 0])

    def test_a_hint_with_another_replication_factor_moves_on(self):
        self.replicas[0].mode = "unavailable"
        self.replicas[1].mode = "hint"
        self.replicas[1].hint = ("ordinal=0;partition=0;partitions=12;"
                                 "replicas=3;self=1;replication_factor=3")
        router = self.router()
        self.assertEqual(list(router.filter_recalled(self.recall()).kept_ids),
                         [7])
        self.assertEqual(self.calls(), [1, 1, 1])
        self.assertEqual(router.replication_factor, 3)
        self.assertEqual(router.stats()["placement_updates"], 1)

    def test_a_hint_with_the_same_replication_factor_is_final(self):
        self.replicas[0].mode = "hint"
        self.replicas[0].hint = ("ordinal=0;partition=0;partitions=12;"
                                 "replicas=3;self=0;replication_factor=2")
        router = self.router()
        with self.assertRaises(RoutingError) as caught:
            router.filter_recalled(self.recall())
        self.assertIn("routing disagreement with replica 0",
                      str(caught.exception))
        self.assertEqual(self.calls(), [1, 0, 0])

    def test_hedging_sends_to_the_next_owner_after_the_delay(self):
        self.replicas[0].mode = "hang"  # no per-try timeout
        router = self.router(hedge_delay_s=0.05)
        self.assertEqual(list(router.filter_recalled(self.recall()).kept_ids),
                         [7])
        self.assertEqual(self.calls(), [1, 1, 0])
        self.assertEqual(router.stats(), {
            "failovers": 0, "hedges": 1, "placement_updates": 0,
            "lagging_answers": 0, "replica_errors": [0, 0, 0]})

    def test_no_hedge_when_owner_zero_answers_first(self):
        router = self.router(hedge_delay_s=20.0)
        router.filter_recalled(self.recall())
        self.assertEqual(self.calls(), [1, 0, 0])
        self.assertEqual(router.stats()["hedges"], 0)

    def test_min_offsets_are_sent_and_a_copy_behind_fails_over(self):
        self.replicas[0].mode = "behind"
        router = self.router()
        request = self.recall()
        # Without offsets owner 0 answers; with them it is behind, owner 1
        # answers; the caller's request is not changed.
        self.assertEqual(list(router.filter_recalled(request).kept_ids), [7])
        self.assertEqual(list(router.filter_recalled(
            request, min_offsets={4: 12}).kept_ids), [7])
        self.assertEqual(len(request.min_offsets), 0)
        self.assertEqual(self.replicas[0].min_offsets, [{}, {4: 12}])
        self.assertEqual(self.replicas[1].min_offsets, [{4: 12}])
        self.assertEqual(router.stats()["failovers"], 1)

    def test_the_last_owners_try_lets_a_lagging_copy_answer(self):
        self.replicas[0].mode = self.replicas[1].mode = "lagging"
        router = self.router()
        request = self.recall()
        response = router.filter_recalled(request)
        self.assertEqual(list(response.kept_ids), [7])
        self.assertTrue(response.staleness.lagging)
        self.assertEqual(response.staleness.lag_ms, 1300)
        # Owner 0 was asked for a fresh answer, owner 1 (the last) for any.
        self.assertEqual(self.replicas[0].allow_lagging, [False])
        self.assertEqual(self.replicas[1].allow_lagging, [True])
        self.assertFalse(request.allow_lagging)  # the caller's is unchanged
        self.assertEqual(router.stats()["lagging_answers"], 1)
        self.assertEqual(router.stats()["failovers"], 1)

    def test_a_fresh_owner_zero_is_not_asked_to_allow_lagging(self):
        router = self.router()
        response = router.filter_recalled(self.recall())
        self.assertFalse(response.staleness.lagging)
        self.assertEqual(self.replicas[0].allow_lagging, [False])
        self.assertEqual(router.stats()["lagging_answers"], 0)

    def test_a_single_owner_is_not_asked_to_allow_lagging(self):
        # R = 1: the servers gate no reads; the flag would change nothing.
        router = self.router(replication_factor=1)
        router.filter_recalled(self.recall())
        self.assertEqual(self.replicas[0].allow_lagging, [False])

    def test_written_offsets_merge_the_owners_answers(self):
        router = self.router()
        request = pb.RecordExposureRequest(exposures=[
            pb.Exposure(user_id="user:%d" % i, item_ids=[1])
            for i in range(20)])
        results = router.record_exposure(request)
        self.assertGreater(len(results), 1)
        self.assertEqual(written_offsets(results), {3: 41, 5: 7})

    def test_filter_cache_revalidates_at_the_next_owner(self):
        cache = FilterCache(self.router())
        held = cache.get("homefeed", self.user)
        self.replicas[0].mode = "unavailable"
        self.assertIs(cache.get("homefeed", self.user), held)
        # Pulled from owner 0, confirmed by owner 1 with the version held.
        self.assertEqual(self.replicas[1].pulls, [(EMPTY_VERSION, {}, True)])
        self.assertEqual((cache.full_pulls, cache.not_modified), (1, 1))

    def test_filter_cache_sends_min_offsets_on_every_try(self):
        self.replicas[0].mode = "unavailable"
        cache = FilterCache(self.router())
        cache.get("homefeed", self.user, min_offsets={4: 12})
        # The last owner's try allows lagging, yet keeps the offsets: a
        # copy that has not applied them still refuses.
        self.assertEqual(self.replicas[0].pulls, [("", {4: 12}, False)])
        self.assertEqual(self.replicas[1].pulls, [("", {4: 12}, True)])

    def test_filter_cache_counts_lagging_answers(self):
        self.replicas[0].mode = self.replicas[1].mode = "lagging"
        cache = FilterCache(self.router())
        for _ in range(2):
            cache.get("homefeed", self.user)
        self.assertEqual((cache.full_pulls, cache.not_modified), (1, 1))
        self.assertEqual(cache.lagging_answers, 2)

    def test_filter_cache_serves_no_held_filter_when_every_owner_fails(self):
        cache = FilterCache(self.router())
        cache.get("homefeed", self.user)
        self.replicas[0].mode = self.replicas[1].mode = "unavailable"
        with self.assertRaises(OwnersFailed):
            cache.get("homefeed", self.user, min_offsets={4: 12})

    def test_bad_options_name_the_field(self):
        with self.assertRaisesRegex(ValueError, "replication_factor"):
            self.router(replication_factor=4)
        with self.assertRaisesRegex(ValueError, "per_try_timeout_s"):
            self.router(per_try_timeout_s=0)
        with self.assertRaisesRegex(ValueError, "hedge_delay_s"):
            self.router(hedge_delay_s=-1)


if __name__ == "__main__":
    unittest.main()
