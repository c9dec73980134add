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
import threading

import grpc

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.filter_view import (FORMAT_VERSIONS, FilterView,
                                         MalformedFilter)
from exposure_filter.partitioning import replica_for_user

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
    options = [("grpc.service_config", retry_service_config(**retry)),
               ("grpc.enable_retries", 1)]
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


class RoutingClient:
    """The routing algorithm of docs/scale-out.md: one ExposureFilterClient
    per replica (replica i at index i), each call sent to the user's owner,
    RecordExposure split into one call per owner (sequentially, ascending
    replica). A FAILED_PRECONDITION with an owner hint raises RoutingError
    saying what is misconfigured.

        router = RoutingClient([ExposureFilterClient(connect(a))
                                for a in addresses], partitions=12)
    """

    def __init__(self, clients, partitions):
        if partitions < 1 or not 1 <= len(clients) <= partitions:
            raise ValueError("need 1 <= replicas (%d) <= partitions (%d)"
                             % (len(clients), partitions))
        self.clients = list(clients)
        self.partitions = partitions

    def replica_for_user(self, user_id):
        return replica_for_user(user_id, self.partitions, len(self.clients))

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
        elif hint.get("self") != replica:
            why = ("routing misconfigured: address %d reaches replica %s; "
                   "list the addresses in ordinal order"
                   % (replica, hint.get("self")))
        else:
            why = "routing disagreement with replica %d" % replica
        return RoutingError("%s: %s" % (why, error.details()), hint)

    def _routed(self, method, request):
        replica = self.replica_for_user(request.user_id)
        try:
            return getattr(self.clients[replica], method)(request)
        except grpc.RpcError as e:
            diagnosed = self._diagnose(replica, e)
            if diagnosed is e:
                raise
            raise diagnosed from e

    def filter_recalled(self, request):
        return self._routed("filter_recalled", request)

    def get_filter(self, request):
        return self._routed("get_filter", request)

    def get_user_stats(self, request):
        return self._routed("get_user_stats", request)

    def delete_user(self, request):
        return self._routed("delete_user", request)

    def explain(self, request):
        return self._routed("explain", request)

    def record_exposure(self, request):
        """Returns [(replica, [exposure indices], response or exception)]
        per owner, ascending replica; each owner's write is all-or-nothing,
        so failed indices can be resent (recording is idempotent)."""
        by_owner = {}
        for i, e in enumerate(request.exposures):
            by_owner.setdefault(self.replica_for_user(e.user_id), []).append(i)
        results = []
        for replica in sorted(by_owner):
            indices = by_owner[replica]
            part = pb.RecordExposureRequest(surface=request.surface)
            part.exposures.extend(request.exposures[i] for i in indices)
            try:
                outcome = self.clients[replica].record_exposure(part)
            except grpc.RpcError as e:
                outcome = self._diagnose(replica, e)
            results.append((replica, indices, outcome))
        return results


class FilterCache:
    """Pull mode: the last filter of each (surface, user), revalidated on
    every get() with `if_version` (an unchanged filter costs one small round
    trip and no bytes). Bytes that do not parse, or whose checksum is not the
    announced version, raise MalformedFilter and are not cached. LRU-bounded;
    thread-safe."""

    def __init__(self, client, max_users=100000):
        self.client = client
        self.max_users = max_users
        self.full_pulls = 0
        self.not_modified = 0
        self._lock = threading.Lock()
        self._views = collections.OrderedDict()

    def get(self, surface, user_id):
        key = (surface, user_id)
        with self._lock:
            cached = self._views.get(key)
        # accepted_formats: the versions FilterView reads, so a server that
        # moves to a format this library does not know refuses clearly
        # (FAILED_PRECONDITION) instead of sending bytes it cannot read.
        resp = self.client.get_filter(pb.GetFilterRequest(
            surface=surface, user_id=user_id,
            if_version=cached.version if cached else "",
            accepted_formats=FORMAT_VERSIONS))
        if resp.not_modified:
            if cached is None or resp.version != cached.version:
                raise MalformedFilter("not_modified for version %r, which "
                                      "this cache does not hold" % resp.version)
            with self._lock:
                self.not_modified += 1
                if key in self._views:
                    self._views.move_to_end(key)
            return cached
        view = FilterView.parse(resp.filter)
        if view.version != resp.version:
            raise MalformedFilter("checksum %s does not match version %r"
                                  % (view.version, resp.version))
        with self._lock:
            self.full_pulls += 1
            self._views[key] = view
            self._views.move_to_end(key)
            while len(self._views) > self.max_users:
                self._views.popitem(last=False)
        return view
