"""The golden Session transcripts (tests/testdata/session/, the real
server's answers, pinned by tests/server/session_transcript_test.cc)
replayed against the Python replica's message handling.

Each transcript's requests are made by the replica itself (subscribe,
ping, unsubscribe) on a scripted stream, and the server's answers are
delivered as recorded (request ids mapped to the replica's own); mode-A
requests and requests the replica never makes (none set) are skipped with
their answers. After every answer the replica's local answer for each
user it holds is compared with what the transcript's server holds at that
point (the `! record` / `! delete` lines): a synced user must answer every
item ever named in the transcript, and fresh ones, exactly; a user the
server stopped serving (refused, idle, unsubscribed) must not be answered
locally. Also: every push's hashes are the Python hashes of the ids
recorded, and every snapshot decodes to its version.
From clients/python/ (build/python on PYTHONPATH, EF_TESTDATA_DIR set):
    /usr/bin/python3 -m unittest -v tests.test_session_transcripts
"""

import os
import unittest

import grpc

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.filter_replica import FilterReplica
from exposure_filter.filter_view import FilterView, hash_id

from tests.scripted_session import ScriptedServer
from tests.session_transcripts import read_transcript, transcript_dir

FRESH_IDS = list(range(1000, 1064))


class Replay:
    """One transcript through one replica."""

    def __init__(self, test, name):
        self.test = test
        self.name = name
        self.server = ScriptedServer()
        self.replica = FilterReplica(self.server, max_staleness_s=60.0,
                                     ping_interval_s=30.0, timeout_s=5.0)
        self.call = self.server.next_call()
        self.ids = {}       # transcript request id -> replica's, or None
        self.held = {}      # (surface, user) -> ids the server holds
        self.named = set(FRESH_IDS)  # every id the transcript names
        self.recorded = []  # ids of `! record` lines since the last push
        self.checked = 0

    def send(self, request):
        kind = request.WhichOneof("kind")
        replica = self.replica
        rid = None
        if kind == "subscribe":
            s = request.subscribe
            with replica._lock:  # pylint: disable=protected-access
                e = replica._get_or_create(s.surface, s.user_id)  # pylint: disable=protected-access
                replica._subscribe(e, replica._live_stream())  # pylint: disable=protected-access
            rid = self.call.next_request("subscribe").request_id
        elif kind == "unsubscribe":
            u = request.unsubscribe
            e = replica._entries.get((u.surface, u.user_id))  # pylint: disable=protected-access
            if e is not None and e.subscribed:
                replica.forget(u.surface, u.user_id)
                sent = self.call.next_request("unsubscribe")
                # The replica's unsubscribes are quiet, whatever the
                # transcript's; the answer recorded for one that is not
                # is delivered all the same and must change nothing.
                self.test.assertTrue(sent.unsubscribe.quiet, self.name)
                rid = sent.request_id
        # ping: answered by the scripted server's own pongs; filter and
        # none-set: not the replica's requests.
        self.ids[request.request_id] = rid

    def receive(self, response):
        if response.request_id:
            rid = self.ids.get(response.request_id)
            if rid is None:
                return  # the answer to a request the replica did not make
            response.request_id = rid
        kind = response.WhichOneof("kind")
        if kind == "pong":
            return
        if kind == "snapshot":
            s = response.snapshot
            if not s.not_modified:
                self.test.assertEqual(FilterView.parse(s.filter).version,
                                      s.version, self.name)
        if kind == "push" and not response.push.reset:
            self.test.assertEqual(list(response.push.item_hashes),
                                  [hash_id(i) for i in self.recorded],
                                  self.name)
        self.recorded = []
        self.call.send(response)
        self.replica.sync()
        self.compare()

    def action(self, words):
        if words[0] == "record":
            surface, user, ids = words[1], words[2], [int(i) for i in words[4:]]
            self.held.setdefault((surface, user), set()).update(ids)
            self.named.update(ids)
            self.recorded = ids
        elif words[0] == "delete":
            self.held.pop((words[1], words[2]), None)
        # advance, tick: the server's clock; it shows in its answers.

    def compare(self):
        candidates = sorted(self.named)
        hashes = [hash_id(i) for i in candidates]
        replica = self.replica
        with replica._lock:  # pylint: disable=protected-access
            for key, e in replica._entries.items():  # pylint: disable=protected-access
                local = replica._local(e, hashes)  # pylint: disable=protected-access
                if not (e.synced and e.subscribed):
                    self.test.assertIsNone(local, (self.name, key))
                    continue
                held = self.held.get(key, set())
                self.test.assertEqual(
                    local, [c not in held for c in candidates], (self.name, key))
                self.checked += len(candidates)

    def run(self):
        try:
            for kind, message in read_transcript(self.name):
                getattr(self, kind)(message)
        finally:
            self.replica.close()
        return self


class SessionTranscriptTest(unittest.TestCase):

    def test_subscribe_and_push(self):
        replay = Replay(self, "subscribe_and_push.transcript").run()
        s = replay.replica.stats()
        self.assertEqual((s["snapshots"], s["pushes"], s["resets"], s["gaps"]),
                         (2, 3, 1, 0))
        self.assertGreater(replay.checked, 0)

    def test_filter_versions_and_leases(self):
        replay = Replay(self, "filter_versions_and_leases.transcript").run()
        s = replay.replica.stats()
        self.assertEqual((s["snapshots"], s["not_modified"], s["expired"]),
                         (3, 1, 1))
        self.assertGreater(replay.checked, 0)

    def test_errors(self):
        replay = Replay(self, "errors.transcript").run()
        refused = {key: (e.refused.code(), e.refused.details())
                   for key, e in replay.replica._entries.items()  # pylint: disable=protected-access
                   if e.refused is not None}
        self.assertEqual(refused[("homefeed", "")],
                         (grpc.StatusCode.INVALID_ARGUMENT,
                          "subscribe.user_id: empty"))
        self.assertEqual(refused[("", "d")][0],
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertGreater(replay.checked, 0)

    def test_quiet_unsubscribe(self):
        # Nothing answers the quiet unsubscribe, and nothing the replica
        # holds depends on an answer; the refused one (user_id empty) is
        # not the replica's request (it holds no such user).
        replay = Replay(self, "quiet_unsubscribe.transcript").run()
        s = replay.replica.stats()
        self.assertEqual((s["snapshots"], s["pushes"]), (1, 0))
        self.assertNotIn(("homefeed", "u1"), replay.replica._entries)  # pylint: disable=protected-access
        self.assertGreater(replay.checked, 0)

    def test_every_transcript_is_replayed(self):
        self.assertEqual(sorted(f for f in os.listdir(transcript_dir())
                                if f.endswith(".transcript")),
                         ["errors.transcript",
                          "filter_versions_and_leases.transcript",
                          "quiet_unsubscribe.transcript",
                          "subscribe_and_push.transcript"])


if __name__ == "__main__":
    unittest.main()
