"""A scripted Session server for FilterReplica's unit tests: a stand-in for
a grpc.Channel whose Session calls are driven by the test. The test reads
what the replica sent (`call.next_request()`) and answers with any message
it likes (`call.send(...)`), in any order, so gaps, resyncs, expiries and
clock moves happen exactly when the test says. Pings are answered at once
with `server_time_ms` (FIFO behind whatever the test sent before), unless
`auto_pong` is off; subscribes and mode-A filters likewise when the
test sets `subscribe_answer` / `filter_answer`. Unary FilterRecalled calls are answered by
`unary_answer` and counted.
"""

import queue
import threading

import grpc

from exposure.v1 import exposure_filter_pb2 as pb

# The transcripts' fixed server clock: 2026-11-22T00:00:00Z.
NOW_MS = 1795392000000


class ScriptedRpcError(grpc.RpcError):

    def __init__(self, code, details=""):
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self):
        return self._code

    def details(self):
        return self._details


_END = object()


class ScriptedCall:
    """One Session call: iterates the responses the test sends."""

    def __init__(self, server, request_iterator):
        self.server = server
        self._responses = queue.Queue()
        self._requests = queue.Queue()
        self.ended = threading.Event()
        self._drain = threading.Thread(target=self._read_requests,
                                       args=(request_iterator,), daemon=True)
        self._drain.start()

    def _read_requests(self, request_iterator):
        for r in request_iterator:
            kind = r.WhichOneof("kind")
            answer = None
            if kind == "ping" and self.server.auto_pong:
                answer = pb.SessionResponse(pong=pb.SessionPong(
                    server_time_ms=self.server.server_time_ms,
                    lagging=self.server.lagging))
            elif kind == "subscribe" and self.server.subscribe_answer:
                answer = self.server.subscribe_answer(r.subscribe)
            elif kind == "filter" and self.server.filter_answer:
                answer = self.server.filter_answer(r.filter)
            if answer is None:
                self._requests.put(r)
            else:
                answer.request_id = r.request_id
                self.send(answer)
        # The client half-closed: a server ends the stream with OK.
        self.end(grpc.StatusCode.OK)

    # The test's side.
    def send(self, response):
        self._responses.put(response)

    def end(self, code):
        self._responses.put((_END, code))

    def next_request(self, kind=None, timeout=5.0):
        """The next request the replica sent (skipping other kinds, and
        pings when given a kind)."""
        while True:
            r = self._requests.get(timeout=timeout)
            if kind is None or r.WhichOneof("kind") == kind:
                return r

    def pending_requests(self):
        out = []
        while True:
            try:
                out.append(self._requests.get_nowait())
            except queue.Empty:
                return out

    # The replica's side (a grpc response iterator).
    def __iter__(self):
        return self

    def __next__(self):
        item = self._responses.get()
        if isinstance(item, tuple) and item[0] is _END:
            self.ended.set()
            if item[1] == grpc.StatusCode.OK:
                raise StopIteration
            raise ScriptedRpcError(item[1], "scripted end")
        return item

    def cancel(self):
        self.end(grpc.StatusCode.CANCELLED)


class ScriptedServer:
    """Stands in for a grpc.Channel."""

    def __init__(self):
        self.auto_pong = True
        self.lagging = False
        self.server_time_ms = NOW_MS
        self.calls = queue.Queue()
        self.unary_requests = []
        # Answer subscribes / mode-A filters at once when set: request ->
        # SessionResponse (its request_id is filled in), or None to leave
        # the request to the test.
        self.subscribe_answer = None
        self.filter_answer = None
        self.unary_answer = None  # request -> FilterRecalledResponse

    def stream_stream(self, method, request_serializer=None,
                      response_deserializer=None):
        assert method == "/exposure.v1.ExposureFilter/Session", method

        def start(request_iterator, timeout=None):
            call = ScriptedCall(self, request_iterator)
            self.calls.put(call)
            return call
        return start

    def unary_unary(self, method, request_serializer=None,
                    response_deserializer=None):
        def call(request, timeout=None):
            self.unary_requests.append(request)
            if self.unary_answer is None:
                raise ScriptedRpcError(grpc.StatusCode.UNAVAILABLE, "down")
            return self.unary_answer(request)
        return call

    def next_call(self, timeout=5.0):
        return self.calls.get(timeout=timeout)
