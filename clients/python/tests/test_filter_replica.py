"""FilterReplica (mode B+) against a scripted Session server in this
process (scripted_session.py): which path each check takes (local, mode A
on the stream, unary) when the copy is synced and fresh, after a sequence
gap, a resync notice, a reset, an expired lease, a lagging or silent
server, a refused subscribe, a stream that ended; aging by the server's
clock (dead, uncertain, live); eviction by bytes and forget (both quiet
unsubscribes); stats(). The filters are the golden transcripts' snapshots
(real server bytes). No wall-clock asserts: the path taken and the
counters say what happened.
From clients/python/ (build/python on PYTHONPATH, EF_TESTDATA_DIR set):
    /usr/bin/python3 -m unittest -v tests.test_filter_replica
"""

import threading
import time
import unittest

import grpc

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.filter_replica import (LOCAL, PUSHED_ITEM_BYTES, STREAM,
                                            UNARY, FilterReplica,
                                            ReplicaError)
from exposure_filter.filter_view import FilterView, hash_id

from tests.scripted_session import NOW_MS, ScriptedServer
from tests.session_transcripts import snapshots

SPAN_MS = 432000000       # the transcripts' surface: 5-day slices,
RETENTION_MS = 2592000000  # 30 days retained
# Snapshot 0 holds items 1, 2, 3 recorded at NOW_MS (slice NOW_MS / SPAN);
# snapshot 1 also 4 at NOW_MS and 5, 6 three days earlier (the slice
# before, which ages out first, at OLD_SLICE_EXPIRY_MS).
SNAP_123, SNAP_1TO6 = snapshots("subscribe_and_push.transcript")[:2]
OLD_SLICE_EXPIRY_MS = (NOW_MS // SPAN_MS) * SPAN_MS + RETENTION_MS


def snapshot(base, user="u1", sequence=None):
    s = pb.SessionSnapshot()
    s.CopyFrom(base)
    s.user_id = user
    if sequence is not None:
        s.sequence = sequence
    return pb.SessionResponse(snapshot=s)


def push(user, sequence, ids, event_time_ms=NOW_MS, reset=False):
    return pb.SessionResponse(push=pb.SessionPush(
        surface="homefeed", user_id=user, sequence=sequence,
        event_time_ms=event_time_ms, item_hashes=[hash_id(i) for i in ids],
        reset=reset))


def server_answer(held):
    """A mode-A answer from the ids the "server" holds."""
    def answer(request):
        mask = bytearray((len(request.candidate_ids) + 7) // 8)
        for i, c in enumerate(request.candidate_ids):
            if c not in held:
                mask[i // 8] |= 1 << (i % 8)
        return pb.FilterRecalledResponse(keep_mask=bytes(mask))
    return answer


class FilterReplicaTest(unittest.TestCase):

    def setUp(self):
        self.server = ScriptedServer()
        self.held = {1, 2, 3}
        self.server.filter_answer = lambda r: pb.SessionResponse(
            filter=server_answer(self.held)(r))
        self.server.unary_answer = server_answer(self.held)
        # A bound well above a loaded machine's scheduling stalls, so a
        # check right after sync() is fresh; the stale test waits it out.
        self.replica = FilterReplica(self.server, max_staleness_s=1.0,
                                     ping_interval_s=0.01, timeout_s=5.0)
        self.call = self.server.next_call()

    def tearDown(self):
        self.replica.close()

    def subscribe_with(self, base, user="u1", sequence=None):
        self.server.subscribe_answer = lambda r: snapshot(base, user, sequence)

    def test_first_check_subscribes_and_answers_locally(self):
        self.subscribe_with(SNAP_123)
        keep, path = self.replica.check_path("homefeed", "u1", [1, 2, 3, 4])
        self.assertEqual((keep, path), ([False, False, False, True], LOCAL))
        s = self.replica.stats()
        self.assertEqual((s["snapshots"], s["local_checks"]), (1, 1))
        self.assertEqual(s["hit_ratio"], 1.0)
        self.assertEqual(s["users_held"], 1)
        self.assertGreater(s["bytes_held"], len(SNAP_123.filter))
        self.assertLess(s["staleness_s"], 1.0)

    def test_subscribe_asks_for_format_2_and_sends_the_version_held(self):
        sent = []
        self.server.subscribe_answer = lambda r: (
            sent.append(pb.SessionSubscribe(surface=r.surface, user_id=r.user_id,
                                            if_version=r.if_version,
                                            accepted_formats=r.accepted_formats))
            or snapshot(SNAP_123))
        self.replica.check("homefeed", "u1", [1])
        self.call.send(push("u1", 5, [9]))  # a gap: resubscribes
        # The first pong follows the push, so the resubscribe was sent
        # before it; the second ping goes after the resubscribe.
        self.replica.sync()
        self.replica.sync()
        self.assertEqual([(s.if_version, list(s.accepted_formats)) for s in sent],
                         [("", [2]), (SNAP_123.version, [2])])

    def test_pushed_items_are_filtered_locally(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.call.send(push("u1", 1, [7, 8]))
        self.replica.sync()
        keep, path = self.replica.check_path("homefeed", "u1", [7, 8, 9, 1])
        self.assertEqual((keep, path), ([False, False, True, False], LOCAL))
        self.assertEqual(self.replica.stats()["pushed_items"], 2)

    def test_items_noted_as_shown_are_filtered_before_their_push(self):
        self.replica.note_shown("homefeed", "u1", [7])  # not held: no-op
        self.assertEqual(self.replica.stats()["noted_items"], 0)
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.replica.note_shown("homefeed", "u1", [7, 8])
        keep, path = self.replica.check_path("homefeed", "u1", [7, 8, 9, 1])
        self.assertEqual((keep, path), ([False, False, True, False], LOCAL))
        self.assertEqual(self.replica.stats()["noted_items"], 2)
        # The server's push of the same write changes nothing.
        self.call.send(push("u1", 1, [7, 8]))
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [7, 8, 9]),
                         ([False, False, True], LOCAL))

    def test_a_push_already_in_the_snapshot_is_ignored(self):
        self.subscribe_with(SNAP_123, sequence=4)
        self.replica.check("homefeed", "u1", [1])
        self.call.send(push("u1", 4, [7]))
        self.replica.sync()
        keep, path = self.replica.check_path("homefeed", "u1", [7])
        self.assertEqual((keep, path), ([True], LOCAL))
        self.assertEqual(self.replica.stats()["gaps"], 0)

    def test_a_sequence_gap_goes_to_mode_a_until_a_new_snapshot(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.server.subscribe_answer = None  # the test answers the resubscribe
        self.call.send(push("u1", 2, [7]))  # 1 is missing
        resubscribe = self.call.next_request("subscribe")
        self.assertEqual(resubscribe.subscribe.if_version, SNAP_123.version)
        self.held |= {7}
        keep, path = self.replica.check_path("homefeed", "u1", [7, 9])
        self.assertEqual((keep, path), ([False, True], STREAM))
        # The snapshot answering the resubscribe holds the write (as
        # not_modified it would not; a real server sends the bytes).
        self.call.send(pb.SessionResponse(request_id=resubscribe.request_id,
                                          snapshot=snapshot(SNAP_1TO6, sequence=2).snapshot))
        self.replica.sync()
        keep, path = self.replica.check_path("homefeed", "u1", [5, 9])
        self.assertEqual((keep, path), ([False, True], LOCAL))
        s = self.replica.stats()
        self.assertEqual((s["gaps"], s["not_synced"], s["stream_checks"]), (1, 1, 1))

    def test_a_resync_notice_goes_to_mode_a_until_each_snapshot(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.call.send(pb.SessionResponse(
            resync=pb.SessionResync(reason=pb.SessionResync.QUEUE_FULL)))
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1])[1], STREAM)
        # The server's own snapshot (request_id 0) brings it back.
        self.call.send(snapshot(SNAP_1TO6, sequence=3))
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [5]),
                         ([False], LOCAL))
        self.assertEqual(self.replica.stats()["resyncs"], 1)

    def test_a_reset_forgets_everything_held(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.call.send(push("u1", 1, [7]))
        self.call.send(push("u1", 2, [], reset=True))
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1, 7]),
                         ([True, True], LOCAL))
        self.call.send(push("u1", 3, [8]))
        self.replica.sync()
        self.assertEqual(self.replica.check("homefeed", "u1", [1, 8]), [True, False])
        self.assertEqual(self.replica.stats()["resets"], 1)

    def test_an_expired_lease_resubscribes_on_the_next_check(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.call.send(pb.SessionResponse(unsubscribed=pb.SessionUnsubscribed(
            surface="homefeed", user_id="u1",
            reason=pb.SessionUnsubscribed.IDLE)))
        self.replica.sync()
        self.server.subscribe_answer = None
        keep, path = self.replica.check_path("homefeed", "u1", [1])
        self.assertEqual((keep, path), ([False], STREAM))
        resubscribe = self.call.next_request("subscribe")
        self.assertEqual(resubscribe.subscribe.if_version, SNAP_123.version)
        self.call.send(pb.SessionResponse(
            request_id=resubscribe.request_id, snapshot=pb.SessionSnapshot(
                surface="homefeed", user_id="u1", version=SNAP_123.version,
                not_modified=True, server_time_ms=NOW_MS,
                retention_ms=RETENTION_MS, slice_span_ms=SPAN_MS,
                idle_timeout_ms=600000)))
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1, 9]),
                         ([False, True], LOCAL))
        s = self.replica.stats()
        self.assertEqual((s["expired"], s["not_modified"]), (1, 1))

    def test_not_modified_for_a_version_not_held_is_not_trusted(self):
        self.server.subscribe_answer = lambda r: pb.SessionResponse(
            snapshot=pb.SessionSnapshot(surface="homefeed", user_id="u1",
                                        version="0123456789abcdef",
                                        not_modified=True,
                                        server_time_ms=NOW_MS))
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1])[1], STREAM)

    def test_a_snapshot_whose_bytes_are_not_its_version_is_not_used(self):
        bad = snapshot(SNAP_123)
        bad.snapshot.version = SNAP_1TO6.version
        self.server.subscribe_answer = lambda r: bad
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1, 9]),
                         ([False, True], STREAM))

    def test_no_pong_within_max_staleness_goes_to_mode_a(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.server.auto_pong = False
        time.sleep(1.2)  # > max_staleness_s: the newest pong is too old
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1, 9]),
                         ([False, True], STREAM))
        self.assertEqual(self.replica.stats()["stale"], 1)

    def test_a_lagging_server_is_asked_in_mode_a(self):
        self.subscribe_with(SNAP_123)
        self.server.lagging = True
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1])[1], STREAM)
        self.server.lagging = False
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1])[1], LOCAL)

    def test_aging_by_the_servers_clock(self):
        self.subscribe_with(SNAP_1TO6, sequence=2)
        self.replica.check("homefeed", "u1", [1])
        # Item 7 pushed into the old slice too (a late event).
        self.call.send(push("u1", 3, [7], event_time_ms=NOW_MS - 3 * 86400000))
        self.replica.sync()
        self.held = {1, 2, 3, 4}  # what the server holds once the slice aged
        # The server's clock just short of the old slice's expiry: a pong
        # cannot tell whether it has passed it by now, so mode A.
        self.server.server_time_ms = OLD_SLICE_EXPIRY_MS - 1
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [5, 7, 1]),
                         ([True, True, False], STREAM))
        self.assertEqual(self.replica.stats()["aging"], 1)
        # Shown past it: the slice is dropped, pushed item and all.
        self.server.server_time_ms = OLD_SLICE_EXPIRY_MS
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [5, 6, 7, 1, 4]),
                         ([True, True, True, False, False], LOCAL))

    def test_a_slice_is_never_aged_before_the_server_shows_its_clock(self):
        self.subscribe_with(SNAP_1TO6, sequence=2)
        self.server.server_time_ms = NOW_MS + 86400000  # a day on: all live
        self.assertEqual(self.replica.check_path("homefeed", "u1", [5, 9]),
                         ([False, True], LOCAL))

    def test_a_refused_subscribe_answers_with_the_servers_error(self):
        self.server.subscribe_answer = lambda r: pb.SessionResponse(
            error=pb.SessionError(code=9, message="subscribe.user_id: user "
                                  "\"u1\" is owned by replica 0"))
        self.server.filter_answer = lambda r: pb.SessionResponse(
            error=pb.SessionError(code=9, message="filter.user_id: user "
                                  "\"u1\" is owned by replica 0"))
        with self.assertRaises(ReplicaError) as ctx:
            self.replica.check("homefeed", "u1", [1])
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("filter.user_id", ctx.exception.details())
        self.assertEqual(self.replica.stats()["failed_checks"], 1)

    def test_an_empty_key_is_refused_before_any_call(self):
        with self.assertRaises(ReplicaError) as ctx:
            self.replica.check("homefeed", "u1", [1], ["a", ""])
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("candidate_keys[1]: empty", ctx.exception.details())

    def test_while_the_stream_is_down_checks_go_unary_then_it_reconnects(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.call.end(grpc.StatusCode.UNAVAILABLE)
        self.call.ended.wait(5)
        # Until the reconnect (reconnect_backoff_s, 0.1 s) the stream is down.
        keep, path = self.replica.check_path("homefeed", "u1", [1, 9])
        self.assertEqual(keep, [False, True])
        self.assertIn(path, (UNARY, STREAM))
        second = self.server.next_call()
        deadline = time.monotonic() + 5
        while self.replica.check_path("homefeed", "u1", [1])[1] != LOCAL:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)
        self.assertIsNot(second, self.call)
        self.assertEqual(self.replica.stats()["snapshots"], 2)

    def test_past_max_bytes_the_least_recently_checked_user_is_unsubscribed(self):
        self.server.subscribe_answer = lambda r: snapshot(SNAP_123, r.user_id)
        self.replica.check("homefeed", "u1", [1])
        one_user = self.replica.stats()["bytes_held"]
        # Room for two users (the 1 MiB floor is for production use).
        self.replica.max_bytes = 2 * one_user + one_user // 2
        self.replica.check("homefeed", "u2", [1])
        self.replica.check("homefeed", "u1", [1])  # u2 is now the oldest
        self.replica.check("homefeed", "u3", [1])
        unsubscribe = self.call.next_request("unsubscribe")
        self.assertEqual(unsubscribe.unsubscribe.user_id, "u2")
        self.assertTrue(unsubscribe.unsubscribe.quiet)
        s = self.replica.stats()
        self.assertEqual((s["evictions"], s["users_held"]), (1, 2))
        self.assertLessEqual(s["bytes_held"], self.replica.max_bytes)

    def test_forget_unsubscribes_quietly_and_drops_what_follows(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.replica.forget("homefeed", "u1")
        unsubscribe = self.call.next_request("unsubscribe")
        self.assertEqual(unsubscribe.unsubscribe.user_id, "u1")
        # Quiet: the server answers nothing, so nothing may wait for it.
        self.assertTrue(unsubscribe.unsubscribe.quiet)
        # A push the server queued before it read the unsubscribe, for a
        # user no longer held: dropped.
        self.call.send(push("u1", 1, [7]))
        # A refused quiet unsubscribe is still answered, by its error: it
        # answers no request the replica waits for.
        self.call.send(pb.SessionResponse(
            request_id=unsubscribe.request_id, error=pb.SessionError(
                code=3, message="unsubscribe.user_id: empty")))
        self.replica.sync()
        s = self.replica.stats()
        self.assertEqual((s["pushes"], s["users_held"], s["failed_checks"]),
                         (0, 0, 0))
        # The next check subscribes again, from the server's snapshot alone.
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1, 7]),
                         ([False, True], LOCAL))
        self.assertEqual(self.replica.stats()["snapshots"], 2)

    def hold_a_resubscribe_of_u1(self):
        """u1 and u2 checked (u1 the least recent), then a gap makes u1
        subscribe again: the subscribe the test answers later, in flight."""
        self.server.subscribe_answer = lambda r: snapshot(SNAP_123, r.user_id)
        self.replica.check("homefeed", "u1", [1])
        self.replica.check("homefeed", "u2", [1])
        self.server.subscribe_answer = None
        self.call.send(push("u1", 2, [7]))  # 1 is missing
        resubscribe = self.call.next_request("subscribe")
        self.assertEqual(self.replica.stats()["subscribes_in_flight"], 1)
        return resubscribe

    def answer_late_then_check_u1_again(self, resubscribe):
        """The held subscribe's answer (holding 5) arrives for a user no
        longer held: nothing is left in flight, and u1's next check
        subscribes again and answers from its own snapshot alone."""
        before = self.replica.stats()
        self.call.send(pb.SessionResponse(
            request_id=resubscribe.request_id,
            snapshot=snapshot(SNAP_1TO6, sequence=2).snapshot))
        self.replica.sync()
        s = self.replica.stats()
        self.assertEqual(s["subscribes_in_flight"], 0)
        self.assertEqual((s["users_held"], s["snapshots"]),
                         (before["users_held"], before["snapshots"]))
        self.subscribe_with(SNAP_123)
        self.assertEqual(self.replica.check_path("homefeed", "u1", [1, 5]),
                         ([False, True], LOCAL))
        s = self.replica.stats()
        self.assertEqual((s["subscribes_in_flight"], s["snapshots"]),
                         (0, before["snapshots"] + 1))

    def test_a_user_forgotten_before_its_snapshot_leaves_nothing_in_flight(self):
        resubscribe = self.hold_a_resubscribe_of_u1()
        self.replica.forget("homefeed", "u1")
        self.answer_late_then_check_u1_again(resubscribe)

    def test_a_user_evicted_before_its_snapshot_leaves_nothing_in_flight(self):
        resubscribe = self.hold_a_resubscribe_of_u1()
        one_user = self.replica.stats()["bytes_held"] // 2
        # Room for three users' worth; u2's pushed items make it two on its
        # own, so u1 (least recently checked) is evicted.
        self.replica.max_bytes = 3 * one_user
        self.call.send(push("u2", 1, range(1000, 1001 + one_user
                                           // PUSHED_ITEM_BYTES)))
        self.replica.sync()
        s = self.replica.stats()
        self.assertEqual((s["evictions"], s["users_held"]), (1, 1))
        self.answer_late_then_check_u1_again(resubscribe)

    def test_pushed_items_past_the_limit_are_compacted_by_a_snapshot(self):
        self.replica.compact_after_items = 2
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        self.server.subscribe_answer = None
        self.call.send(push("u1", 1, [4]))
        self.call.send(push("u1", 2, [5]))
        compaction = self.call.next_request("subscribe")
        self.call.send(pb.SessionResponse(request_id=compaction.request_id,
                                          snapshot=snapshot(SNAP_1TO6, sequence=2).snapshot))
        self.replica.sync()
        self.assertEqual(self.replica.check_path("homefeed", "u1", [4, 5, 6, 9]),
                         ([False, False, False, True], LOCAL))
        self.assertEqual(self.replica.stats()["compactions"], 1)

    def test_checks_from_several_threads_while_pushes_arrive(self):
        self.subscribe_with(SNAP_123)
        self.replica.check("homefeed", "u1", [1])
        pushed = list(range(100, 300))
        errors = []
        paths = []

        def checker():
            try:
                for _ in range(200):
                    keep, path = self.replica.check_path(
                        "homefeed", "u1", [1, 2, 3, 99] + pushed)
                    # Never an item of the snapshot kept, never a fresh
                    # one removed, whatever the pushes applied meanwhile
                    # (and whichever path: on a loaded machine a pong can
                    # come later than max_staleness_s, then mode A).
                    self.assertEqual(keep[:4], [False, False, False, True])
                    paths.append(path)
            except AssertionError as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=checker) for _ in range(4)]
        for t in threads:
            t.start()
        for seq, item in enumerate(pushed, start=1):
            self.call.send(push("u1", seq, [item]))
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(paths), 4 * 200)
        self.replica.sync()
        self.assertFalse(any(self.replica.check("homefeed", "u1", pushed)))
        self.assertEqual(self.replica.stats()["pushes"], len(pushed))

    def test_the_snapshots_decode(self):
        for s in (SNAP_123, SNAP_1TO6):
            self.assertEqual(FilterView.parse(s.filter).version, s.version)


if __name__ == "__main__":
    unittest.main()
