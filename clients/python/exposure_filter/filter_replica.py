"""FilterReplica: mode B+ for Python recall servers (docs/session-stream.md).

One Session stream to a server; each user checked is subscribed on first
use, its filter arrives once (format 2, decoded by filter_view.FilterView)
and every exposure the server applies for it after that is pushed as exact
item hashes, so a check is a local computation with no call at all.
Whenever the local copy cannot be trusted the check is answered through
mode A instead, on the stream (or by the unary FilterRecalled while the
stream is down): the copy is not synced (first snapshot, a sequence gap, a
resync, an expired lease), the newest pong answers a ping sent more than
`max_staleness_s` ago (or the server says it lags), or a slice held is at
its expiry and the server's clock cannot be told from here. So a check
never misses an exposure the server acknowledged more than
`max_staleness_s` before it (the spec's guarantee).

    replica = FilterReplica(connect("localhost:50051"))
    keep = replica.check("homefeed", "u1", ids=[101, 102], keys=["video:9"])
    fresh = [c for c, k in zip([101, 102, "video:9"], keep) if k]
    replica.close()

The local answer is FilterRecalled's, with one difference in the safe
direction: a fresh candidate that collides only with fingerprints the
server recorded after the last snapshot is kept here and removed there (at
most the FP mass those items add, within the surface's delta). A fresh
snapshot (the replica compacts past `compact_after_items` pushed items)
makes them identical again.

Memory is bounded by `max_bytes` (filters and pushed items of all users,
as estimated below): past it the least recently checked user is
unsubscribed and dropped. Thread-safe: one background thread reads the
stream, one pings; checks may come from any thread. One replica per server
(per owner, with scale-out).
"""

import collections
import queue
import threading
import time

import grpc

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.filter_view import (FilterView, MalformedFilter,
                                         hash_id, hash_key)

SERVICE = "exposure.v1.ExposureFilter"
FORMAT = 2  # what a snapshot carries (filter_view reads it)

# Bytes a user costs beyond its filter's: the entry object, its strings and
# the maps' slots; and per pushed item a dict slot holding two ints (a
# CPython dict entry is ~100 bytes with its int objects).
ENTRY_OVERHEAD_BYTES = 512
PUSHED_ITEM_BYTES = 100
# At most this many pings unanswered: a server that answers none of them is
# not made to queue more; the checks go to mode A (stale) until it does.
MAX_PINGS_IN_FLIGHT = 256

LOCAL, STREAM, UNARY = "local", "stream", "unary"


class ReplicaError(grpc.RpcError):
    """A check that got no answer: the server's refusal (its code and
    field-naming message), or DEADLINE_EXCEEDED / UNAVAILABLE."""

    def __init__(self, code, message):
        super().__init__(message)
        self._code = code
        self._message = message

    def code(self):
        return self._code

    def details(self):
        return self._message

    def __str__(self):
        return "%s: %s" % (self._code.name, self._message)


def _status_code(value):
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code
    return grpc.StatusCode.UNKNOWN


class _Entry:
    """One user's local copy. Guarded by the replica's lock."""

    __slots__ = ("surface", "user_id", "filter", "view", "version", "pushed",
                 "sequence", "synced", "subscribed", "compacting", "refused",
                 "retention_ms", "span_ms", "next_expiry_ms", "renew_at",
                 "subscribe_id", "bytes")

    def __init__(self, surface, user_id):
        self.surface = surface
        self.user_id = user_id
        # The last snapshot's filter (None before the first and after a
        # reset: nothing claimed) and the same without the slices aged out.
        self.filter = None
        self.view = None
        self.version = ""
        # Items pushed since the snapshot: hash -> newest slice index it
        # was recorded in (the one that ages out last).
        self.pushed = {}
        self.sequence = 0
        # A snapshot and every push after it, no gap, resync, expiry or
        # broken stream since.
        self.synced = False
        # A subscribe was sent on the current stream and not ended since.
        self.subscribed = False
        self.compacting = False
        self.refused = None  # ReplicaError of the last subscribe
        self.retention_ms = 0
        self.span_ms = 1
        # Smallest server time at which a slice held here ages out.
        self.next_expiry_ms = None
        self.renew_at = float("inf")
        self.subscribe_id = 0
        self.bytes = 0

    def update_expiry(self):
        ends = [s.end_ms for s in self.view.slices] if self.view else []
        ends += [(slice_ + 1) * self.span_ms for slice_ in self.pushed.values()]
        self.next_expiry_ms = (min(ends) + self.retention_ms) if ends else None

    def age(self, seen_ms):
        """Drops what the server's clock, as far as it has shown it, has
        aged out (format 2's rule: a slice is live while its end is after
        now - retention)."""
        cutoff = seen_ms - self.retention_ms
        if self.view is not None:
            live = [s for s in self.view.slices if s.end_ms > cutoff]
            if len(live) != len(self.view.slices):
                v = self.view
                self.view = FilterView(v._data, v.format_version, live,  # pylint: disable=protected-access
                                       v.fp_rate_target, v.slice_span_ms,
                                       v.checksum)
        span = self.span_ms
        self.pushed = {h: s for h, s in self.pushed.items()
                       if (s + 1) * span > cutoff}
        self.update_expiry()

    def cost(self):
        return (ENTRY_OVERHEAD_BYTES + len(self.surface) + len(self.user_id)
                + (len(self.filter._data) if self.filter else 0)  # pylint: disable=protected-access
                + len(self.pushed) * PUSHED_ITEM_BYTES)


class _Pending:
    """A mode-A request on the stream waiting for its answer."""

    __slots__ = ("done", "keep_mask", "error")

    def __init__(self):
        self.done = False
        self.keep_mask = None
        self.error = None


class _Stream:
    """One Session call: a queue feeds grpc's request iterator, a thread
    reads the responses and hands each to the replica."""

    def __init__(self, replica, method):
        self.replica = replica
        self.ended = False
        self._method = method
        self._requests = queue.Queue()
        self._call = None
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="exposure-filter-session")

    def start(self):
        """Opens the call; the replica makes this the current stream first,
        so no response is taken for a stream replaced since."""
        self._call = self._method(self._request_iterator())
        self._reader.start()

    def _request_iterator(self):
        while True:
            r = self._requests.get()
            if r is None:
                return
            yield r

    def send(self, request):
        self._requests.put(request)

    def _read(self):
        code = grpc.StatusCode.OK
        try:
            for response in self._call:
                self.replica._on_response(self, response)  # pylint: disable=protected-access
        except grpc.RpcError as e:
            code = e.code() if callable(getattr(e, "code", None)) else None
        finally:
            self._requests.put(None)
            self.replica._on_ended(self, code)  # pylint: disable=protected-access

    def close_writes(self):
        self._requests.put(None)

    def cancel(self):
        self._requests.put(None)
        if self._call is not None:
            self._call.cancel()

    def join(self, timeout=None):
        if self._reader.is_alive():
            self._reader.join(timeout)


class FilterReplica:
    """See the module's documentation. `channel` is a grpc.Channel to the
    server (exposure_filter.client.connect)."""

    def __init__(self, channel, max_bytes=256 << 20, max_staleness_s=0.1,
                 ping_interval_s=0.02, timeout_s=0.5,
                 compact_after_items=4096, reconnect_backoff_s=0.1):
        if not 0 < ping_interval_s < max_staleness_s:
            raise ValueError("need 0 < ping_interval_s < max_staleness_s "
                             "(a healthy stream must stay fresh)")
        if max_bytes < 1 << 20 or compact_after_items < 1 or timeout_s <= 0:
            raise ValueError("need max_bytes >= 1 MiB, compact_after_items "
                             ">= 1, timeout_s > 0")
        self.max_bytes = max_bytes
        self.max_staleness_s = max_staleness_s
        self.ping_interval_s = ping_interval_s
        self.timeout_s = timeout_s
        self.compact_after_items = compact_after_items
        self.reconnect_backoff_s = reconnect_backoff_s
        self._session = channel.stream_stream(
            "/%s/Session" % SERVICE,
            request_serializer=pb.SessionRequest.SerializeToString,
            response_deserializer=pb.SessionResponse.FromString)
        self._unary = channel.unary_unary(
            "/%s/FilterRecalled" % SERVICE,
            request_serializer=pb.FilterRecalledRequest.SerializeToString,
            response_deserializer=pb.FilterRecalledResponse.FromString)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # any state change
        self._reconnect_lock = threading.Lock()
        self._next_id = 1
        self._stopping = False
        self._stop = threading.Event()
        self._stream = None
        self._reconnect_at = 0.0
        self._entries = collections.OrderedDict()  # (surface, user): _Entry, LRU last
        self._bytes = 0
        # What the replica knows of the server's clock and its freshness:
        # the largest server_time_ms received, and the newest pong's server
        # time with the monotonic time its ping was sent.
        self._seen_ms = 0
        self._ref_ms = 0
        self._ref_sent = None
        self._lagging = False
        self._pings = {}       # id -> monotonic send time
        self._subscribes = {}  # id -> _Entry, to route a refusal
        self._filters = {}     # id -> _Pending
        self._n = collections.Counter()
        self.reconnect()
        self._pinger = threading.Thread(target=self._ping_loop, daemon=True,
                                        name="exposure-filter-session-ping")
        self._pinger.start()

    # --- Public face ---------------------------------------------------

    def check(self, surface, user_id, ids=(), keys=()):
        """keep[i] (True: keep, never shown) for ids, then keys."""
        return self.check_path(surface, user_id, ids, keys)[0]

    def check_path(self, surface, user_id, ids=(), keys=()):
        """(keep, path): the answer and where it came from, LOCAL, STREAM
        (mode A on the stream) or UNARY (mode A, the stream being down).
        Raises ReplicaError with the server's code and message (an empty
        key is INVALID_ARGUMENT, as FilterRecalled says), or
        DEADLINE_EXCEEDED / UNAVAILABLE when no answer came."""
        ids = list(ids)
        keys = list(keys)
        for i, k in enumerate(keys):
            if len(k) == 0:
                raise ReplicaError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "candidate_keys[%d]: empty" % i)
        deadline = time.monotonic() + self.timeout_s
        # Hash once, outside the lock.
        hashes = [hash_id(i) for i in ids] + [hash_key(k) for k in keys]
        with self._lock:
            e = self._get_or_create(surface, user_id)
            stream = self._live_stream()
            now = time.monotonic()
            first = False
            subscribed_at = now
            if stream is not None and not e.subscribed:
                first = e.filter is None and not e.synced
                self._subscribe(e, stream)
            elif stream is not None and e.synced and now >= e.renew_at:
                # Renew the lease before the server lets it run out; the
                # answer is a fresh snapshot, which also compacts.
                self._subscribe(e, stream)
            if first:
                # First use: the snapshot, and the pong of the ping sent
                # right behind the subscribe, are one round trip away:
                # waiting costs what mode A would, without the candidates.
                while (not e.synced and e.refused is None and e.subscribed
                       and self._wait(deadline)):
                    pass
                while ((self._ref_sent is None
                        or self._ref_sent < subscribed_at)
                       and self._live_stream() is not None
                       and self._wait(deadline)):
                    pass
            copy = self._local_copy(e)
            if copy is not None:
                self._n["local_checks"] += 1
        if copy is not None:
            # Outside the lock, so the reader thread applies what arrives
            # meanwhile: the view is never changed in place (aging and
            # snapshots replace it), and pushes only add to the items, so
            # the answer is the copy's at the decision or later.
            return _answer(copy, hashes), LOCAL
        try:
            # Mode A has its own timeout, whatever the wait above took.
            return self._mode_a(surface, user_id, ids, keys,
                                time.monotonic() + self.timeout_s)
        except ReplicaError:
            with self._lock:
                self._n["failed_checks"] += 1
            raise

    def sync(self, timeout_s=None):
        """Returns once a ping sent now is answered: every write the server
        had acknowledged before the call is then in the local copies of
        synced users (or the replica knows they are not synced). Raises
        ReplicaError UNAVAILABLE / DEADLINE_EXCEEDED otherwise."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        with self._lock:
            stream = self._live_stream()
            if stream is None:
                raise ReplicaError(grpc.StatusCode.UNAVAILABLE,
                                   "session: the stream is down")
            sent = time.monotonic()
            if self._send_ping(stream) is None:
                raise ReplicaError(grpc.StatusCode.UNAVAILABLE,
                                   "session: too many pings unanswered")
            while self._ref_sent is None or self._ref_sent < sent:
                if self._live_stream() is not stream:
                    raise ReplicaError(grpc.StatusCode.UNAVAILABLE,
                                       "session: the stream ended")
                if not self._wait(deadline):
                    raise ReplicaError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                       "session: no pong within the timeout")

    def forget(self, surface, user_id):
        """Drops the user's copy and unsubscribes it; the next check
        subscribes again."""
        with self._lock:
            e = self._entries.pop((surface, user_id), None)
            if e is not None:
                self._bytes -= e.bytes
                e.bytes = 0
                self._drop(e)

    def note_shown(self, surface, user_id, ids=()):
        """Items this process just showed the user (handed to the exposure
        logger): this replica's checks remove them at once. A feed's next
        request can come before the server's push of that write does, and
        a local answer within max_staleness would then keep them. Held as
        pushed items (they age and count as those do) until a snapshot
        replaces the copy with the server's state. A no-op for a user not
        held here or not synced (its checks go to the server then)."""
        hashes = [hash_id(i) for i in ids]
        with self._lock:
            e = self._find(surface, user_id)
            if e is None or not e.synced or not hashes:
                return
            # The slice the server will file the write in: its clock now,
            # as far as the last pong tells.
            now_ms = self._seen_ms
            if self._ref_sent is not None:
                now_ms = max(now_ms, self._ref_ms + int(
                    (time.monotonic() - self._ref_sent) * 1000))
            slice_ = now_ms // e.span_ms
            for h in hashes:
                if e.pushed.get(h, slice_) <= slice_:
                    e.pushed[h] = slice_
            self._n["noted_items"] += len(hashes)
            e.update_expiry()
            self._account(e)

    def reconnect(self):
        """Ends the stream and opens a new one: every user is answered
        through mode A until its new snapshot. Done on its own when pings go
        unanswered for 10 x max_staleness (at least 1 s)."""
        with self._reconnect_lock:
            with self._lock:
                old = self._stream
            if old is not None:
                # Still the current stream while it ends, so _on_ended
                # unsyncs every user and fails the requests waiting on it.
                old.cancel()
                old.join(5.0)
                with self._lock:
                    self._n["reconnects"] += 1
            stream = _Stream(self, self._session)
            with self._lock:
                if self._stopping:
                    return
                self._stream = stream
                self._ref_sent = None  # nothing vouched for yet
                self._pings.clear()
                # A server that refuses the stream at once is not redialled
                # more often than this.
                self._reconnect_at = time.monotonic() + self.reconnect_backoff_s
            stream.start()

    def close(self):
        """Half-closes the stream and stops the threads."""
        with self._lock:
            self._stopping = True
            stream = self._stream
            self._changed.notify_all()
        self._stop.set()
        self._pinger.join()
        if stream is not None:
            # Half-close: the server drops the stream's subscriptions and
            # ends it with OK; cancel only if it does not.
            stream.close_writes()
            stream.join(1.0)
            stream.cancel()
            stream.join(5.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self):
        """Counters since creation and the current state: checks by path
        (local_checks, stream_checks, unary_checks, failed_checks), why
        checks left the local path (not_synced, stale, aging), hit_ratio,
        snapshots, not_modified, pushes, pushed_items, noted_items (see
        note_shown), gaps, resyncs,
        resets, expired, compactions, reconnects, evictions, bytes_held,
        users_held, subscribes_in_flight (subscribes sent and not yet
        answered by a snapshot or an error), and staleness_s (now minus the
        send time of the newest ping answered; None before any pong)."""
        with self._lock:
            s = {k: self._n[k] for k in (
                "local_checks", "stream_checks", "unary_checks",
                "failed_checks", "not_synced", "stale", "aging", "snapshots",
                "not_modified", "pushes", "pushed_items", "noted_items",
                "gaps", "resyncs",
                "resets", "expired", "compactions", "reconnects",
                "evictions")}
            s["bytes_held"] = self._bytes
            s["users_held"] = len(self._entries)
            s["subscribes_in_flight"] = len(self._subscribes)
            s["staleness_s"] = (None if self._ref_sent is None
                                else time.monotonic() - self._ref_sent)
        answered = s["local_checks"] + s["stream_checks"] + s["unary_checks"]
        s["hit_ratio"] = s["local_checks"] / answered if answered else 0.0
        return s

    # --- Checks (the lock held where noted) ---------------------------

    def _wait(self, deadline):
        """Waits for a change until `deadline`; False once it has passed.
        Lock held."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self._changed.wait(left)
        return True

    def _live_stream(self):
        s = self._stream
        return s if s is not None and not s.ended else None

    def _fresh(self, now):
        return (self._live_stream() is not None and not self._lagging
                and self._ref_sent is not None
                and self._ref_sent >= now - self.max_staleness_s)

    def _local(self, e, hashes):
        """The local answer, or None (counted) when the copy cannot give
        it. Lock held."""
        copy = self._local_copy(e)
        return None if copy is None else _answer(copy, hashes)

    def _local_copy(self, e):
        """(view, pushed items) to answer from, or None (counted) when the
        copy cannot be trusted. Lock held."""
        now = time.monotonic()
        if not e.synced:
            self._n["not_synced"] += 1
            return None
        if not self._fresh(now):
            self._n["stale"] += 1
            return None
        if e.next_expiry_ms is not None and e.next_expiry_ms <= self._seen_ms:
            e.age(self._seen_ms)
        # The latest the server's clock can read now: it read the ping
        # after it was sent (equal clock rates).
        upper = self._ref_ms + int((now - self._ref_sent) * 1000) + 1
        if e.next_expiry_ms is not None and e.next_expiry_ms <= upper:
            # A slice at its expiry: whether the server still holds it
            # cannot be told until a pong shows its clock past it.
            self._n["aging"] += 1
            return None
        return e.view, e.pushed

    def _mode_a(self, surface, user_id, ids, keys, deadline):
        request = pb.FilterRecalledRequest(
            surface=surface, user_id=user_id, candidate_ids=ids,
            candidate_keys=keys, mode=pb.KEEP_MASK)
        n = len(ids) + len(keys)
        with self._lock:
            stream = self._live_stream()
            if stream is not None:
                rid = self._take_id()
                pending = _Pending()
                self._filters[rid] = pending
                stream.send(pb.SessionRequest(request_id=rid, filter=request))
                while not pending.done and self._wait(deadline):
                    pass
                if not pending.done:
                    self._filters.pop(rid, None)
                    raise ReplicaError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                       "session: no answer to filter within "
                                       "%.3f s" % self.timeout_s)
                if pending.error is not None:
                    raise pending.error
                if pending.keep_mask is not None:
                    self._n["stream_checks"] += 1
                    return _unpack(pending.keep_mask, n), STREAM
                # The stream ended before the answer: the unary call.
        left = deadline - time.monotonic()
        try:
            resp = self._unary(request, timeout=max(left, 0.001))
        except grpc.RpcError as e:
            raise ReplicaError(e.code(), e.details()) from e
        with self._lock:
            self._n["unary_checks"] += 1
        return _unpack(resp.keep_mask, n), UNARY

    # --- The copies held (lock held) ----------------------------------

    def _take_id(self):
        rid = self._next_id
        self._next_id += 1
        return rid

    def _get_or_create(self, surface, user_id):
        key = (surface, user_id)
        e = self._entries.get(key)
        if e is None:
            e = _Entry(surface, user_id)
            self._entries[key] = e
            self._account(e)
        else:
            self._entries.move_to_end(key)
        return e

    def _find(self, surface, user_id):
        return self._entries.get((surface, user_id))

    def _subscribe(self, e, stream):
        """A subscribe with the version held, and a ping right behind it:
        its pong arrives just after the snapshot and makes a first check
        fresh without waiting for the pinger."""
        rid = self._take_id()
        e.subscribed = True
        e.refused = None
        if e.subscribe_id:
            self._subscribes.pop(e.subscribe_id, None)
        e.subscribe_id = rid
        self._subscribes[rid] = e
        stream.send(pb.SessionRequest(request_id=rid, subscribe=pb.SessionSubscribe(
            surface=e.surface, user_id=e.user_id, if_version=e.version,
            accepted_formats=[FORMAT])))
        self._send_ping(stream)

    def _send_ping(self, stream):
        if len(self._pings) >= MAX_PINGS_IN_FLIGHT:
            return None
        rid = self._take_id()
        self._pings[rid] = time.monotonic()
        stream.send(pb.SessionRequest(request_id=rid, ping=pb.SessionPing()))
        return rid

    def _account(self, e):
        """Re-accounts e's bytes and evicts the least recently checked
        users beyond max_bytes."""
        if self._entries.get((e.surface, e.user_id)) is not e:
            return  # evicted since
        cost = e.cost()
        self._bytes += cost - e.bytes
        e.bytes = cost
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, victim = self._entries.popitem(last=False)
            self._bytes -= victim.bytes
            victim.bytes = 0
            self._n["evictions"] += 1
            self._drop(victim)

    def _drop(self, e):
        e.synced = False
        if e.subscribe_id:
            # A subscribe still unanswered: its answer will find no entry,
            # so nothing else would take its id off the map while the
            # stream lasts.
            self._subscribes.pop(e.subscribe_id, None)
            e.subscribe_id = 0
        stream = self._live_stream()
        if e.subscribed and stream is not None:
            # Quiet: no answer wanted. The user is no longer held, so its
            # pushes still in flight are dropped (_on_push), and a refused
            # unsubscribe's error matches no request waited for.
            stream.send(pb.SessionRequest(
                request_id=self._take_id(),
                unsubscribe=pb.SessionUnsubscribe(surface=e.surface,
                                                  user_id=e.user_id,
                                                  quiet=True)))
        e.subscribed = False

    # --- What the stream brings (reader thread) -----------------------

    def _on_response(self, stream, r):
        with self._lock:
            if stream is not self._stream:
                return  # a stream replaced since
            kind = r.WhichOneof("kind")
            if kind == "snapshot":
                self._on_snapshot(r.snapshot)
            elif kind == "push":
                self._on_push(r.push, stream)
            elif kind in ("filter", "error"):
                self._on_answer(r, kind)
            elif kind == "pong":
                self._on_pong(r)
            elif kind == "resync":
                self._n["resyncs"] += 1
                self._mark_all_unsynced(unsubscribed=False)
            elif kind == "unsubscribed":
                u = r.unsubscribed
                if u.reason == pb.SessionUnsubscribed.IDLE:
                    self._n["expired"] += 1
                    e = self._find(u.surface, u.user_id)
                    if e is not None:
                        e.subscribed = False
                        e.synced = False
            self._changed.notify_all()

    def _on_answer(self, r, kind):
        pending = self._filters.pop(r.request_id, None)
        if pending is not None:
            pending.done = True
            if kind == "filter":
                pending.keep_mask = r.filter.keep_mask
            else:
                pending.error = ReplicaError(_status_code(r.error.code),
                                             r.error.message)
            return
        e = self._subscribes.pop(r.request_id, None)
        if e is not None and kind == "error":
            e.refused = ReplicaError(_status_code(r.error.code),
                                     r.error.message)
            e.subscribe_id = 0
            e.subscribed = False
            e.synced = False

    def _on_pong(self, r):
        sent = self._pings.get(r.request_id)
        if sent is None:
            return
        # Older pings are answered already or never will be (FIFO).
        for rid in [i for i, t in self._pings.items() if t <= sent]:
            del self._pings[rid]
        if self._ref_sent is None or sent >= self._ref_sent:
            self._ref_sent = sent
            self._ref_ms = r.pong.server_time_ms
            self._lagging = r.pong.lagging
        self._seen_ms = max(self._seen_ms, r.pong.server_time_ms)

    def _on_snapshot(self, s):
        self._seen_ms = max(self._seen_ms, s.server_time_ms)
        e = self._find(s.surface, s.user_id)
        if e is None:
            return  # evicted since it was subscribed
        # A client takes a snapshot as the one for its user, whatever its
        # request_id (a queued or resync snapshot comes with 0).
        self._subscribes.pop(e.subscribe_id, None)
        e.subscribe_id = 0
        self._n["snapshots"] += 1
        if s.not_modified:
            self._n["not_modified"] += 1
            if e.filter is None or s.version != e.version:
                # not_modified for a version not held (a reset since, or a
                # server bug): not trusted.
                e.synced = False
                e.subscribed = False
                e.refused = ReplicaError(
                    grpc.StatusCode.DATA_LOSS,
                    "session: not_modified for version %r, not held"
                    % s.version)
                return
        else:
            try:
                view = FilterView.parse(s.filter)
                if view.version != s.version:
                    raise MalformedFilter("checksum %s is not the version %r"
                                          % (view.version, s.version))
            except MalformedFilter as err:
                # Never used: the user is answered through mode A until a
                # good snapshot arrives.
                e.synced = False
                e.subscribed = False
                e.refused = ReplicaError(grpc.StatusCode.DATA_LOSS,
                                         "session: snapshot: %s" % err)
                return
            e.filter = view
            e.version = s.version
        e.view = e.filter
        e.pushed = {}
        e.sequence = s.sequence
        e.retention_ms = s.retention_ms
        e.span_ms = max(1, s.slice_span_ms)
        e.synced = True
        e.subscribed = True
        e.compacting = False
        e.refused = None
        e.renew_at = time.monotonic() + s.idle_timeout_ms / 2000.0
        e.update_expiry()
        self._account(e)

    def _on_push(self, p, stream):
        e = self._find(p.surface, p.user_id)
        if e is None or not e.synced or p.sequence <= e.sequence:
            return
        self._n["pushes"] += 1
        if p.sequence != e.sequence + 1:
            # A gap: something was lost. Not trusted until a new snapshot.
            self._n["gaps"] += 1
            e.synced = False
            self._subscribe(e, stream)
            return
        e.sequence = p.sequence
        if p.reset:
            self._n["resets"] += 1
            e.filter = None
            e.view = None
            e.version = ""
            e.pushed = {}
        else:
            self._n["pushed_items"] += len(p.item_hashes)
            slice_ = p.event_time_ms // e.span_ms
            pushed = e.pushed
            for h in p.item_hashes:
                if pushed.get(h, slice_) <= slice_:
                    pushed[h] = slice_
            if len(pushed) >= self.compact_after_items and not e.compacting:
                self._n["compactions"] += 1
                e.compacting = True
                self._subscribe(e, stream)
        e.update_expiry()
        self._account(e)

    def _mark_all_unsynced(self, unsubscribed):
        for e in self._entries.values():
            e.synced = False
            if unsubscribed:
                e.subscribed = False

    def _on_ended(self, stream, _code):
        with self._lock:
            stream.ended = True
            if stream is not self._stream:
                return
            for pending in self._filters.values():
                pending.done = True  # no mask, no error: the unary call
            self._filters.clear()
            self._subscribes.clear()
            self._pings.clear()
            self._reconnect_at = time.monotonic() + self.reconnect_backoff_s
            self._mark_all_unsynced(unsubscribed=True)
            self._changed.notify_all()

    # --- Pinger ---------------------------------------------------------

    def _ping_loop(self):
        # Pings unanswered this long: the server or the connection is stuck
        # (a broken connection can take keepalive's minutes to notice).
        silence = max(1.0, 10 * self.max_staleness_s)
        while not self._stop.wait(self.ping_interval_s):
            reconnect = False
            with self._lock:
                now = time.monotonic()
                stream = self._live_stream()
                if stream is None:
                    reconnect = now >= self._reconnect_at
                elif any(now - t > silence for t in self._pings.values()):
                    reconnect = True
                elif self._entries:  # nothing to keep fresh otherwise
                    self._send_ping(stream)
            if reconnect:
                self.reconnect()


def _answer(copy, hashes):
    """keep[i] from a user's copy: not claimed by a live slice of the
    snapshot's filter, and not pushed since."""
    view, pushed = copy
    keep = (view.keep_mask_hashes(hashes) if view is not None
            else [True] * len(hashes))
    if pushed:
        keep = [k and h not in pushed for k, h in zip(keep, hashes)]
    return keep


def _unpack(mask, n):
    """keep[i] from a KEEP_MASK answer (bit i % 8 of byte i / 8)."""
    if len(mask) != (n + 7) // 8:
        raise ReplicaError(grpc.StatusCode.INTERNAL,
                           "keep_mask of %d bytes for %d candidates"
                           % (len(mask), n))
    return [bool(mask[i >> 3] >> (i & 7) & 1) for i in range(n)]
