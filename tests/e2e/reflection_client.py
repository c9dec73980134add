"""A small gRPC server-reflection client (grpc.reflection.v1alpha), the subset
grpcurl uses: list services, fetch the FileDescriptorProtos that declare a
symbol (with their transitive dependencies), and build message classes from
them dynamically, so RPCs can be called with no .proto files at hand.

The reflection protocol's own messages are generated at import time from
tests/e2e/proto/grpc/reflection/v1alpha/reflection.proto with the system protoc
(/usr/bin/protoc, whose version matches Debian's python3-protobuf).
"""

import atexit
import importlib
import importlib.util
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

_HERE = os.path.dirname(os.path.abspath(__file__))
_PROTO_ROOT = os.path.join(_HERE, "proto")
_REFLECTION_PROTO = "grpc/reflection/v1alpha/reflection.proto"
PROTOC = os.environ.get("EF_PROTOC", "/usr/bin/protoc")

REFLECTION_SERVICE = "grpc.reflection.v1alpha.ServerReflection"
REFLECTION_METHOD = "/" + REFLECTION_SERVICE + "/ServerReflectionInfo"

_gen_lock = threading.Lock()
_gen_module = None
_gen_dir = None


def reflection_pb2():
    """The generated reflection_pb2 module (generated once per process)."""
    global _gen_module, _gen_dir
    with _gen_lock:
        if _gen_module is None:
            _gen_dir = tempfile.mkdtemp(prefix="ef_e2e_reflection_")
            atexit.register(shutil.rmtree, _gen_dir, True)
            subprocess.run(
                [PROTOC, "--proto_path=" + _PROTO_ROOT,
                 "--python_out=" + _gen_dir, _REFLECTION_PROTO],
                check=True)
            # Load the generated file by path, under a private module name, so
            # it cannot clash with a grpc.reflection package installed on the
            # system.
            path = os.path.join(_gen_dir, _REFLECTION_PROTO[:-len(".proto")]
                                + "_pb2.py")
            spec = importlib.util.spec_from_file_location(
                "_ef_e2e_reflection_pb2", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["_ef_e2e_reflection_pb2"] = module
            _gen_module = module
        return _gen_module


def file_symbols(fdp):
    """Every fully-qualified symbol a FileDescriptorProto declares."""
    prefix = fdp.package + "." if fdp.package else ""
    out = set()

    def add_enum(scope, enum):
        out.add(scope + enum.name)
        # Enum values are scoped like their enum's siblings (C++ rules).
        for v in enum.value:
            out.add(scope + v.name)

    def add_message(scope, msg):
        name = scope + msg.name
        out.add(name)
        for f in msg.field:
            out.add(name + "." + f.name)
        for ext in msg.extension:
            out.add(name + "." + ext.name)
        for oneof in msg.oneof_decl:
            out.add(name + "." + oneof.name)
        for nested in msg.nested_type:
            add_message(name + ".", nested)
        for enum in msg.enum_type:
            add_enum(name + ".", enum)

    for msg in fdp.message_type:
        add_message(prefix, msg)
    for enum in fdp.enum_type:
        add_enum(prefix, enum)
    for ext in fdp.extension:
        out.add(prefix + ext.name)
    for svc in fdp.service:
        out.add(prefix + svc.name)
        for m in svc.method:
            out.add(prefix + svc.name + "." + m.name)
    return out


class ReflectionError(Exception):
    def __init__(self, code, message):
        super().__init__("reflection error %d: %s" % (code, message))
        self.code = code
        self.message = message


class ReflectionClient:
    """One ServerReflectionInfo stream; requests are answered in order.

    Like grpcurl, it keeps every FileDescriptorProto the server sent on this
    stream (the server may omit files it already sent earlier on the same
    stream) and asks for missing dependencies by file name.
    """

    def __init__(self, channel, timeout=60.0):
        self._pb2 = reflection_pb2()
        self._timeout = timeout
        self._requests = queue.Queue()
        call = channel.stream_stream(
            REFLECTION_METHOD,
            request_serializer=self._pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=self._pb2.ServerReflectionResponse.FromString)
        self._responses = call(self._request_iter(), timeout=timeout)
        self._files = {}  # file name -> FileDescriptorProto

    def _request_iter(self):
        while True:
            req = self._requests.get()
            if req is None:
                return
            yield req

    def close(self):
        self._requests.put(None)
        try:
            for _ in self._responses:
                pass
        except Exception:  # pylint: disable=broad-except
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ask(self, **fields):
        req = self._pb2.ServerReflectionRequest(**fields)
        self._requests.put(req)
        resp = next(self._responses)
        if resp.HasField("error_response"):
            raise ReflectionError(resp.error_response.error_code,
                                  resp.error_response.error_message)
        return resp

    # --- raw protocol ---------------------------------------------------

    def list_services(self):
        resp = self._ask(list_services="*")
        if resp.WhichOneof("message_response") != "list_services_response":
            raise AssertionError("unexpected reply to list_services: %r" % resp)
        return [s.name for s in resp.list_services_response.service]

    def _files_of(self, resp):
        if resp.WhichOneof("message_response") != "file_descriptor_response":
            raise AssertionError("expected file_descriptor_response, got %r"
                                 % resp)
        out = []
        for raw in resp.file_descriptor_response.file_descriptor_proto:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
            self._files.setdefault(fdp.name, fdp)
            out.append(fdp)
        return out

    def file_containing_symbol(self, symbol):
        """All FileDescriptorProtos of the server's reply, in reply order.

        The protocol does not fix their order; use declaring_file() to pick
        the one that declares `symbol`. (gRPC C++ <= 1.5x also repeats files
        from earlier replies on the same stream, grpc/grpc#18009, so "the
        first file" is not always the answer.)
        """
        return self._files_of(self._ask(file_containing_symbol=symbol))

    def declaring_file(self, symbol, files=None):
        """The FileDescriptorProto declaring `symbol`, asking if needed."""
        if files is None:
            files = self.file_containing_symbol(symbol)
        for fdp in files:
            if symbol in file_symbols(fdp):
                return fdp
        raise AssertionError("none of %s declares %s"
                             % ([f.name for f in files], symbol))

    def file_by_filename(self, name):
        return self._files_of(self._ask(file_by_filename=name))

    # --- grpcurl-like helpers -------------------------------------------

    def _closure(self, name):
        """Files `name` depends on, transitively, dependencies first."""
        ordered, seen = [], set()

        def visit(n):
            if n in seen:
                return
            seen.add(n)
            if n not in self._files:
                self.file_by_filename(n)
            if n not in self._files:
                raise AssertionError("server did not send %s" % n)
            for dep in self._files[n].dependency:
                visit(dep)
            ordered.append(self._files[n])

        visit(name)
        return ordered

    def pool_for_symbols(self, symbols):
        """A fresh DescriptorPool holding the files declaring `symbols`."""
        pool = descriptor_pool.DescriptorPool()
        added = set()
        for symbol in symbols:
            for fdp in self._closure(self.declaring_file(symbol).name):
                if fdp.name not in added:
                    pool.Add(fdp)
                    added.add(fdp.name)
        return pool


class DynamicService:
    """Unary stubs for one service, built from reflected descriptors only."""

    def __init__(self, channel, pool, service_name):
        self.descriptor = pool.FindServiceByName(service_name)
        self._factory = message_factory.MessageFactory(pool)
        self._channel = channel
        self._stubs = {}
        for method in self.descriptor.methods:
            if method.client_streaming or method.server_streaming:
                continue
            self._stubs[method.name] = channel.unary_unary(
                "/%s/%s" % (service_name, method.name),
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=self.message_class(
                    method.output_type.full_name).FromString)

    def message_class(self, full_name):
        desc = self._factory.pool.FindMessageTypeByName(full_name)
        return self._factory.GetPrototype(desc)

    def request(self, method_name, **fields):
        method = self.descriptor.methods_by_name[method_name]
        return self.message_class(method.input_type.full_name)(**fields)

    # The deadline only bounds a hung call; it is no verdict. Generous: an
    # ASan server on a loaded 2-core machine answers large requests in
    # seconds.
    def call(self, method_name, request=None, timeout=60.0, **fields):
        if request is None:
            request = self.request(method_name, **fields)
        return self._stubs[method_name](request, timeout=timeout)

    def enum_value(self, enum_full_name, value_name):
        enum = self._factory.pool.FindEnumTypeByName(enum_full_name)
        return enum.values_by_name[value_name].number
