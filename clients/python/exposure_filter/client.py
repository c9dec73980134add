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
from exposure_filter.filter_view import FilterView, MalformedFilter

SERVICE = "exposure.v1.ExposureFilter"

_METHODS = {
    "RecordExposure": (pb.RecordExposureRequest, pb.RecordExposureResponse),
    "FilterRecalled": (pb.FilterRecalledRequest, pb.FilterRecalledResponse),
    "GetFilter": (pb.GetFilterRequest, pb.GetFilterResponse),
    "GetUserStats": (pb.GetUserStatsRequest, pb.GetUserStatsResponse),
    "DeleteUser": (pb.DeleteUserRequest, pb.DeleteUserResponse),
    "GetServerStats": (pb.GetServerStatsRequest, pb.GetServerStatsResponse),
}


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
        resp = self.client.get_filter(pb.GetFilterRequest(
            surface=surface, user_id=user_id,
            if_version=cached.version if cached else ""))
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
