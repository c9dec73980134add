"""A thin exposure.v1 client on Debian's python3-grpcio: per-call timeouts,
bounded retries of UNAVAILABLE by gRPC's own retry policy, and a FilterCache
for pull mode that revalidates with `if_version`.

Messages come from `protoc --python_out` (the build writes them to
build/python/exposure/v1/exposure_filter_pb2.py; put that directory and
clients/python on PYTHONPATH). No gRPC code generator is needed: each method
is a unary_unary callable on the channel.

    client = ExposureFilterClient(connect("localhost:50051"))
    cache = FilterCache(client)
    view = cache.get("homefeed", "u1")          # FilterView, exact server answers
    fresh = [i for i, keep in zip(ids, view.keep_mask_ids(ids)) if keep]
"""

import collections
import json
import queue
import threading
import time

import grpc

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.filter_view import (FORMAT_VERSIONS, FilterView,
                                         MalformedFilter)
from exposure_filter.partitioning import (owners_of_partition, owners_of_user,
                                          replica_for_user)

SERVICE = "exposure.v1.ExposureFilter"

_METHODS = {
    "RecordExposure": (pb.RecordExposureRequest, pb.RecordExposureResponse),
    "FilterRecalled": (pb.FilterRecalledRequest, pb.FilterRecalledResponse),
    "GetFilter": (pb.GetFilterRequest, pb.GetFilterResponse),
    "GetUserStats": (pb.GetUserStatsRequest, pb.GetUserStatsResponse),
    "DeleteUser": (pb.DeleteUserRequest, pb.DeleteUserResponse),
    "GetServerStats": (pb.GetServerStatsRequest, pb.GetServerStatsResponse),
    "Explain": (pb.ExplainRequest, pb.ExplainResponse),
}

# A partitioned replica's "not my user" answer names the owner in this
# trailing metadata key (docs/scale-out.md):
# "ordinal=1;partition=7;partitions=12;replicas=3;self=0[;address=...]".
OWNER_METADATA_KEY = "x-exposure-owner"


def retry_service_config(max_attempts=3, initial_backoff_s=0.05,
                         max_backoff_s=1.0, backoff_multiplier=2.0):
    """The gRPC service config that retries UNAVAILABLE on every RPC (every
    exposure.v1 RPC is safe to repeat). gRPC caps attempts at 5."""
    if max_attempts <= 1:
        return "{}"
    return json.dumps({"methodConfig": [{
        "name": [{"service": SERVICE}],
        "retryPolicy": {
            "maxAttempts": max_attempts,
            "initialBackoff": "%.6fs" % initial_backoff_s,
            "maxBackoff": "%.6fs" % max_backoff_s,
            "backoffMultiplier": backoff_multiplier,
            "retryableStatusCodes": ["UNAVAILABLE"],
        }}]})


def connect(target, credentials=None, **retry):
    """A channel to `target` with the retry policy (see retry_service_config)."""
    # Reconnect after a failed connection within 100 ms, then at most every
    # second (gRPC's defaults: 1 s growing to 120 s): a restarted replica is
    # reachable again soon enough for failover (the C++
    # ClientOptions::max_reconnect_backoff says why).
    options = [("grpc.service_config", retry_service_config(**retry)),
               ("grpc.enable_retries", 1),
               ("grpc.initial_reconnect_backoff_ms", 100),
               ("grpc.max_reconnect_backoff_ms", 1000)]
    if credentials is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, credentials, options=options)


class ExposureFilterClient:
    """One method per RPC, snake_case, taking and returning messages; each
    call has a deadline of `timeout_s` (all attempts together). Errors raise
    grpc.RpcError with the server's code and field-naming message."""

    def __init__(self, channel, timeout_s=0.5):
        self.channel = channel
        self.timeout_s = timeout_s
        self._calls = {
            name: channel.unary_unary(
                "/%s/%s" % (SERVICE, name),
                request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString)
            for name, (req, resp) in _METHODS.items()}

    def _call(self, name, request):
        return self._calls[name](request, timeout=self.timeout_s)

    def future(self, name, request, timeout_s):
        """RPC `name` (e.g. "FilterRecalled") started with its own timeout:
        a grpc.Future (result(), exception(), cancel(), add_done_callback).
        RoutingClient's failover and hedging drive calls this way."""
        return self._calls[name].future(request, timeout=timeout_s)

    def record_exposure(self, request):
        return self._call("RecordExposure", request)

    def filter_recalled(self, request):
        return self._call("FilterRecalled", request)

    def get_filter(self, request):
        return self._call("GetFilter", request)

    def get_user_stats(self, request):
        return self._call("GetUserStats", request)

    def delete_user(self, request):
        return self._call("DeleteUser", request)

    def get_server_stats(self, request=None):
        return self._call("GetServerStats", request or pb.GetServerStatsRequest())

    def explain(self, request):
        return self._call("Explain", request)


def owner_hint(rpc_error):
    """The owner a partitioned replica named when refusing another replica's
    user (FAILED_PRECONDITION), as a dict of ints (and "address"); None if
    the error carries none."""
    for key, value in (rpc_error.trailing_metadata() or ()):
        if key != OWNER_METADATA_KEY:
            continue
        hint = {}
        for pair in value.split(";"):
            k, _, v = pair.partition("=")
            hint[k] = v if k == "address" else int(v)
        return hint
    return None


class RoutingError(Exception):
    """Client and cluster disagree on P, N or the replica order: no retry
    can fix it. `hint` is the server's owner_hint()."""

    def __init__(self, message, hint):
        super().__init__(message)
        self.hint = hint


class OwnersFailed(grpc.RpcError):
    """Every owner of the user failed (UNAVAILABLE), or the deadline ran out
    before all were tried (DEADLINE_EXCEEDED). `failures` lists
    "replica r: CODE: details" per try, in order."""

    def __init__(self, code, message, failures):
        super().__init__(message)
        self._code = code
        self._message = message
        self.failures = failures

    def code(self):
        return self._code

    def details(self):
        return self._message

    def trailing_metadata(self):
        return ()

    def __str__(self):
        return "%s: %s" % (self._code.name, self._message)


# The reads a replicated server gates on its lag: they take allow_lagging
# and answer with their staleness.
_LAG_GATED_READS = frozenset(
    ("FilterRecalled", "GetFilter", "GetUserStats", "Explain"))


class RoutingClient:
    """The routing algorithm of docs/scale-out.md: one ExposureFilterClient
    per replica (replica i at index i), each call sent to the user's owner,
    RecordExposure split into one call per owner (sequentially, ascending
    replica). A FAILED_PRECONDITION with an owner hint raises RoutingError
    saying what is misconfigured.

    Replication: with `replication_factor` R each user has R
    owners, owner i = (partition + i) % N. A call goes to owner 0 first and
    fails over to the next owner, inside one deadline of `timeout_s`
    (default: replica 0's client's), when a try ends in UNAVAILABLE
    (refused, connection lost, or a copy that is not caught up) or exceeds
    `per_try_timeout_s`. Writes fail over too (re-recording is a no-op).
    With `hedge_delay_s` a read still unanswered after that delay is also
    sent to the next owner; the first answer wins, the other is cancelled.
    Other codes are final, except a FAILED_PRECONDITION whose owner hint
    reports another R with the same P and N: the client adopts it and goes
    on with the owners not tried yet. stats() counts failovers, hedges,
    placement updates and failed tries per replica. Thread-safe.

    Read-your-writes (docs/scale-out.md "Consistency"): a
    replicated server answers a write with the Kafka offsets it got
    (`written_offsets`; `written_offsets(results)` merges a routed
    record_exposure's). A read given them as `min_offsets=` sends them; an
    owner that has not applied them answers UNAVAILABLE and the read fails
    over like any other UNAVAILABLE.

    Least-stale reads: a read's try on the user's last owner (R >= 2; a
    failover or a hedge) sets `allow_lagging`, so that copy answers even
    when it lags past its --max_serving_lag instead of UNAVAILABLE; the
    response's `staleness` says how far behind it was (`lag_ms` of the
    user's partition, `lagging` when it answered past its bound), and
    stats()["lagging_answers"] counts those answers.

        router = RoutingClient([ExposureFilterClient(connect(a))
                                for a in addresses], partitions=12,
                               replication_factor=2, per_try_timeout_s=0.2)
    """

    def __init__(self, clients, partitions, replication_factor=1,
                 timeout_s=None, per_try_timeout_s=None, hedge_delay_s=None):
        if partitions < 1 or not 1 <= len(clients) <= partitions:
            raise ValueError("need 1 <= replicas (%d) <= partitions (%d)"
                             % (len(clients), partitions))
        if not 1 <= replication_factor <= len(clients):
            raise ValueError("replication_factor: need 1 <= %d <= replicas "
                             "(%d)" % (replication_factor, len(clients)))
        for name, value in (("per_try_timeout_s", per_try_timeout_s),
                            ("hedge_delay_s", hedge_delay_s),
                            ("timeout_s", timeout_s)):
            if value is not None and not value > 0:
                raise ValueError("%s: must be > 0 or None, got %r"
                                 % (name, value))
        self.clients = list(clients)
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.timeout_s = (timeout_s if timeout_s is not None
                          else getattr(self.clients[0], "timeout_s", 0.5))
        self.per_try_timeout_s = per_try_timeout_s
        self.hedge_delay_s = hedge_delay_s
        self._lock = threading.Lock()
        self._failovers = 0
        self._hedges = 0
        self._placement_updates = 0
        self._lagging_answers = 0
        self._replica_errors = [0] * len(self.clients)

    def stats(self):
        """Counters since creation: failovers, hedges, placement_updates,
        lagging_answers (reads a copy answered past its --max_serving_lag),
        replica_errors (failed tries per ordinal; cancelled hedges not)."""
        with self._lock:
            return {"failovers": self._failovers, "hedges": self._hedges,
                    "placement_updates": self._placement_updates,
                    "lagging_answers": self._lagging_answers,
                    "replica_errors": list(self._replica_errors)}

    def replica_for_user(self, user_id):
        return replica_for_user(user_id, self.partitions, len(self.clients))

    def owners_for_user(self, user_id):
        """The user's R owners, owner 0 first: the order calls try them."""
        return owners_of_user(user_id, self.partitions, len(self.clients),
                              self.replication_factor)

    def _diagnose(self, replica, error):
        if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
            return error
        hint = owner_hint(error)
        if hint is None:
            return error
        if (hint.get("partitions"), hint.get("replicas")) != (
                self.partitions, len(self.clients)):
            why = ("routing misconfigured: this client routes with "
                   "partitions=%d replicas=%d but replica %d runs "
                   "--partitions=%d --replicas=%d"
                   % (self.partitions, len(self.clients), replica,
                      hint["partitions"], hint["replicas"]))
        elif hint.get("replication_factor", 1) != self.replication_factor:
            why = ("routing misconfigured: this client routes with "
                   "replication_factor=%d but replica %d runs "
                   "--replication_factor=%d"
                   % (self.replication_factor, replica,
                      hint.get("replication_factor", 1)))
        elif hint.get("self") != replica:
            why = ("routing misconfigured: address %d reaches replica %s; "
                   "list the addresses in ordinal order"
                   % (replica, hint.get("self")))
        else:
            why = "routing disagreement with replica %d" % replica
        return RoutingError("%s: %s" % (why, error.details()), hint)

    def _replan(self, user_id, error):
        """The owners to go on with after `error`, or None: only when the
        owner hint reports another R with this client's P and N."""
        hint = owner_hint(error)
        if hint is None or (hint.get("partitions"), hint.get("replicas")) != (
                self.partitions, len(self.clients)):
            return None
        r = hint.get("replication_factor", 1)
        if not 1 <= r <= len(self.clients):
            return None
        with self._lock:
            if r == self.replication_factor:
                return None
            self.replication_factor = r
            self._placement_updates += 1
        return owners_of_user(user_id, self.partitions, len(self.clients), r)

    def _failover(self, rpc, request, user_id, owners, hedge):
        """One call with failover between `owners` (and hedging when `hedge`
        and hedge_delay_s are set), all inside one deadline."""
        deadline = time.monotonic() + self.timeout_s
        hedge_delay = self.hedge_delay_s if hedge else None
        finished = queue.Queue()
        tries = []  # (replica, future), in start order
        state = {"next": 0, "outstanding": 0, "hedge_at": None,
                 "last_try": None, "last_resort": None}
        lag_gated = rpc in _LAG_GATED_READS
        # Replicas whose try went out as the last owner's (allow_lagging),
        # and those that answered UNAVAILABLE without it: once every owner
        # failed, a lag-gated read asks the latter again with the flag (the
        # last owner in placement order may be down while one of them only
        # lagged).
        asked_as_last = set()
        refused = []

        def launch(last_resort_replica=None):
            if last_resort_replica is None:
                replica = owners[state["next"]]
                state["next"] += 1
                last_owner = len(owners) > 1 and state["next"] == len(owners)
            else:
                replica = last_resort_replica
                last_owner = True
            now = time.monotonic()
            budget = deadline - now
            if self.per_try_timeout_s is not None:
                budget = min(budget, self.per_try_timeout_s)
            sent = request
            # The last of two or more owners: nobody is left after it, so a
            # lagging copy's answer (saying how stale it is) beats a failed
            # read. One owner (R = 1): such servers gate no reads.
            if last_owner:
                asked_as_last.add(replica)
            if lag_gated and last_owner and not request.allow_lagging:
                if state["last_try"] is None:
                    last_try = type(request)()
                    last_try.CopyFrom(request)
                    last_try.allow_lagging = True
                    state["last_try"] = last_try
                sent = state["last_try"]
            future = self.clients[replica].future(rpc, sent, budget)
            tries.append((replica, future))
            state["outstanding"] += 1
            if hedge_delay is not None:
                state["hedge_at"] = now + hedge_delay
            future.add_done_callback(
                lambda f, r=replica: finished.put((r, f)))

        def cancel_rest():
            for _, f in tries:
                f.cancel()  # a no-op on finished calls

        failures = []
        launch()
        while True:
            wait = None
            if state["hedge_at"] is not None:
                wait = max(0.0, state["hedge_at"] - time.monotonic())
            try:
                replica, future = finished.get(timeout=wait)
            except queue.Empty:  # the hedge timer fired
                if (state["next"] < len(owners)
                        and time.monotonic() < deadline):
                    launch()
                    with self._lock:
                        self._hedges += 1
                else:
                    state["hedge_at"] = None
                continue
            state["outstanding"] -= 1
            error = future.exception()
            if error is None:
                cancel_rest()
                result = future.result()
                # getattr: a stand-in client may answer something else
                # than the message (then it was not answered lagging).
                staleness = getattr(result, "staleness", None)
                if lag_gated and getattr(staleness, "lagging", False):
                    with self._lock:
                        self._lagging_answers += 1
                return result
            if not isinstance(error, grpc.RpcError):
                cancel_rest()
                raise error
            with self._lock:
                self._replica_errors[replica] += 1
            code = error.code()
            if (code == grpc.StatusCode.UNAVAILABLE and replica not in refused
                    and replica not in asked_as_last):
                refused.append(replica)
            failures.append("replica %d: %s: %s"
                            % (replica, code.name, error.details()))
            in_time = time.monotonic() < deadline
            # DEADLINE_EXCEEDED is a per-try timeout while the call has time
            # left, else the call's own: then no owner is started any more.
            # CANCELLED comes from a server shutting down as the call
            # arrived (a cancelled losing hedge raises
            # FutureCancelledError, not an RpcError): safe to repeat.
            go_on = code in (grpc.StatusCode.UNAVAILABLE,
                             grpc.StatusCode.DEADLINE_EXCEEDED,
                             grpc.StatusCode.CANCELLED)
            if not go_on and code == grpc.StatusCode.FAILED_PRECONDITION:
                replanned = self._replan(user_id, error)
                # Owner i is (p + i) % N whatever R: a new list extends or
                # truncates the old one, whose first `next` were tried.
                if replanned is not None and len(replanned) > state["next"]:
                    owners = replanned
                    go_on = True
            if not go_on:
                cancel_rest()
                diagnosed = self._diagnose(replica, error)
                if diagnosed is error:
                    raise error
                raise diagnosed from error
            if state["next"] < len(owners) and in_time:
                launch()
                with self._lock:
                    self._failovers += 1
                continue
            if state["outstanding"]:
                continue  # a hedged try may still answer
            if lag_gated and len(owners) > 1 and in_time:
                if state["last_resort"] is None:
                    state["last_resort"] = [
                        r for r in refused if r not in asked_as_last]
                if state["last_resort"]:
                    launch(state["last_resort"].pop(0))
                    with self._lock:
                        self._failovers += 1
                    continue
            untried = owners[state["next"]:]
            if len(tries) == 1 and not untried:
                raise error  # one owner (R = 1): its error as it came
            if untried:
                raise OwnersFailed(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    "deadline of %gs reached before owners %s were tried: %s"
                    % (self.timeout_s, ", ".join(map(str, untried)),
                       "; ".join(failures)), failures)
            if not in_time:
                raise OwnersFailed(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    "deadline of %gs reached; every owner was tried: %s"
                    % (self.timeout_s, "; ".join(failures)), failures)
            raise OwnersFailed(
                grpc.StatusCode.UNAVAILABLE,
                "every owner failed (%d of %d tried): %s"
                % (min(state["next"], len(owners)), len(owners),
                   "; ".join(failures)), failures)

    def _routed(self, rpc, request, hedge=True, min_offsets=None):
        if min_offsets:
            # A copy: the caller's request is left as it was.
            with_offsets = type(request)()
            with_offsets.CopyFrom(request)
            with_offsets.min_offsets.update(min_offsets)
            request = with_offsets
        return self._failover(rpc, request, request.user_id,
                              self.owners_for_user(request.user_id), hedge)

    def filter_recalled(self, request, min_offsets=None):
        return self._routed("FilterRecalled", request,
                            min_offsets=min_offsets)

    def get_filter(self, request, min_offsets=None):
        return self._routed("GetFilter", request, min_offsets=min_offsets)

    def get_user_stats(self, request, min_offsets=None):
        return self._routed("GetUserStats", request, min_offsets=min_offsets)

    def delete_user(self, request):
        # A write (deleting twice deletes once): fails over, never hedged.
        return self._routed("DeleteUser", request, hedge=False)

    def explain(self, request, min_offsets=None):
        return self._routed("Explain", request, min_offsets=min_offsets)

    def record_exposure(self, request):
        """Returns [(replica, [exposure indices], response or exception)]
        per owner 0, ascending replica; each owner's write is all-or-nothing,
        fails over to the next owner like a read (never hedged), so failed
        indices can be resent (recording is idempotent)."""
        by_owner = {}
        for i, e in enumerate(request.exposures):
            by_owner.setdefault(self.replica_for_user(e.user_id), []).append(i)
        results = []
        for replica in sorted(by_owner):
            indices = by_owner[replica]
            part = pb.RecordExposureRequest(surface=request.surface)
            part.exposures.extend(request.exposures[i] for i in indices)
            # Users sharing owner 0 share every owner: (replica + i) % N.
            owners = owners_of_partition(replica, len(self.clients),
                                         self.replication_factor)
            try:
                outcome = self._failover(
                    "RecordExposure", part,
                    request.exposures[indices[0]].user_id, owners, False)
            except grpc.RpcError as e:
                outcome = e
            except RoutingError as e:
                outcome = e
            results.append((replica, indices, outcome))
        return results


def written_offsets(results):
    """{partition: offset} of a routed record_exposure's successful owners
    (the highest offset per partition): a later read's min_offsets."""
    merged = {}
    for _, _, outcome in results:
        for partition, offset in getattr(outcome, "written_offsets",
                                         {}).items():
            merged[partition] = max(offset, merged.get(partition, offset))
    return merged


class FilterCache:
    """Pull mode: the last filter of each (surface, user), revalidated on
    every get() with `if_version` (an unchanged filter costs one small round
    trip and no bytes). Bytes that do not parse, or whose checksum is not the
    announced version, raise MalformedFilter and are not cached; a failed
    revalidation raises and the held filter is not served instead.
    LRU-bounded; thread-safe.

    `client` is an ExposureFilterClient or a RoutingClient: through a
    router, get() fails over between the user's owners like its other
    reads, and a filter held from one owner is revalidated at whichever
    answers (the version is the checksum of the bytes, the same on every
    copy holding the same bytes). Read-your-writes: get(...,
    min_offsets=written_offsets(results)) sends the user's write offsets
    with the revalidation, so a held filter is served only once a copy that
    applied the write says it is current (docs/scale-out.md
    "Read-your-writes"). `lagging_answers` counts answers from a copy past
    its --max_serving_lag (a router's last try)."""

    def __init__(self, client, max_users=100000):
        self.client = client
        self.max_users = max_users
        self.full_pulls = 0
        self.not_modified = 0
        self.lagging_answers = 0
        self._lock = threading.Lock()
        self._views = collections.OrderedDict()

    def get(self, surface, user_id, min_offsets=None):
        key = (surface, user_id)
        with self._lock:
            cached = self._views.get(key)
        # accepted_formats: the versions FilterView reads, so a server that
        # moves to a format this library does not know refuses clearly
        # (FAILED_PRECONDITION) instead of sending bytes it cannot read.
        resp = self.client.get_filter(pb.GetFilterRequest(
            surface=surface, user_id=user_id,
            if_version=cached.version if cached else "",
            accepted_formats=FORMAT_VERSIONS,
            min_offsets=min_offsets or {}))
        lagging = resp.staleness.lagging
        if resp.not_modified:
            if cached is None or resp.version != cached.version:
                raise MalformedFilter("not_modified for version %r, which "
                                      "this cache does not hold" % resp.version)
            with self._lock:
                self.not_modified += 1
                self.lagging_answers += lagging
                if key in self._views:
                    self._views.move_to_end(key)
            return cached
        view = FilterView.parse(resp.filter)
        if view.version != resp.version:
            raise MalformedFilter("checksum %s does not match version %r"
                                  % (view.version, resp.version))
        with self._lock:
            self.full_pulls += 1
            self.lagging_answers += lagging
            self._views[key] = view
            self._views.move_to_end(key)
            while len(self._views) > self.max_users:
                self._views.popitem(last=False)
        return view
