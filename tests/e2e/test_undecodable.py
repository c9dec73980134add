"""Undecodable requests against the real binary: raw bytes sent
with grpcio's unary_unary (no serializer) to every method the server's
reflection lists for exposure.v1.ExposureFilter. Each must answer
INVALID_ARGUMENT naming the request type and the defect -- not the
UNIMPLEMENTED with an empty message that gRPC's generated handlers give --
count under its method and code in grpc_server_handled_total, change
nothing, and leave the server serving.

  EF_E2E_SERVER=build/src/server/exposure-filter-server \\
      /usr/bin/python3 -m unittest -v test_undecodable   (from tests/e2e/)
"""

import os

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import time  # pylint: disable=wrong-import-position
import unittest

import grpc

import reflection_client as rc
import server_harness as harness
from test_operations import scrape, value

SERVICE = "exposure.v1.ExposureFilter"
INVALID = grpc.StatusCode.INVALID_ARGUMENT
# 0xC3 starts a two-byte UTF-8 character; 0x28 ('(') cannot continue it.
NOT_UTF8 = b"\xc3\x28"
# A tag whose varint never ends.
GARBAGE = b"\xff" * 11
STRING = 9  # FieldDescriptor.TYPE_STRING


def length_delimited(number, value):
    """Field `number` (< 16) with a length-delimited value (< 128 bytes)."""
    return bytes([number << 3 | 2, len(value)]) + value


class UndecodableRequestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.monotonic()
        cls.server = harness.ServerProcess().start()
        try:
            cls.channel = cls.server.channel()
            with rc.ReflectionClient(cls.channel) as refl:
                pool = refl.pool_for_symbols([SERVICE])
            cls.methods = list(pool.FindServiceByName(SERVICE).methods)
        except Exception:
            cls.server.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.channel.close()
        finally:
            cls.server.close()

    def call_raw(self, method, payload):
        call = self.channel.unary_unary(
            "/%s/%s" % (SERVICE, method.name),
            request_serializer=None, response_deserializer=None)
        return call(payload, timeout=30)

    def assert_refused(self, method, payload, message_prefix):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.call_raw(method, payload)
        self.assertEqual(ctx.exception.code(), INVALID, method.name)
        self.assertTrue(ctx.exception.details().startswith(message_prefix),
                        "%s: %r" % (method.name, ctx.exception.details()))

    def method(self, name):
        return next(m for m in self.methods if m.name == name)

    def test_every_rpc_names_its_type_for_garbage(self):
        self.assertGreaterEqual(len(self.methods), 10)
        before = scrape(self.server.admin_port)
        for m in self.methods:
            self.assert_refused(
                m, GARBAGE,
                "%s: not a valid protobuf message: invalid field tag at byte 0"
                % m.input_type.full_name)
        after = scrape(self.server.admin_port)
        for m in self.methods:
            # The session stream is counted as the bidi stream it is.
            streaming = m.client_streaming or m.server_streaming
            labels = dict(grpc_service=SERVICE, grpc_method=m.name,
                          grpc_type="bidi_stream" if streaming else "unary")
            self.assertEqual(
                value(after, "grpc_server_handled_total",
                      grpc_code="InvalidArgument", **labels)
                - value(before, "grpc_server_handled_total",
                        grpc_code="InvalidArgument", **labels), 1, m.name)
            self.assertEqual(value(after, "grpc_server_handled_total",
                                   grpc_code="Unimplemented", **labels), 0)

    def test_every_rpc_with_a_string_names_the_non_utf8_field(self):
        tried = 0
        for m in self.methods:
            strings = [f for f in m.input_type.fields if f.type == STRING]
            if not strings:
                continue  # GetServerStats, ListTracedUsers: no string field
            f = strings[0]
            tried += 1
            index = "[0]" if f.label == f.LABEL_REPEATED else ""
            self.assert_refused(
                m, length_delimited(f.number, NOT_UTF8),
                "%s: not a valid protobuf message: %s%s: invalid UTF-8 in a "
                "string field" % (m.input_type.full_name, f.name, index))
        self.assertEqual(tried, 8)
        # libprotobuf's own line for each of them reaches the log at most
        # once per 10 s (src/server/observability/protobuf_log.h), not once per request.
        utf8_lines = [l for l in self.server.log().splitlines()
                      if "invalid UTF-8 data" in l]
        self.assertGreaterEqual(len(utf8_lines), 1)
        elapsed_s = time.monotonic() - self.started
        self.assertLessEqual(len(utf8_lines), 1 + int(elapsed_s // 10))
        self.assertIn("event=protobuf_log", utf8_lines[0])

    def test_a_batch_with_one_bad_key_records_nothing(self):
        # Exposure{user_id: "u1", item_ids: [7]} (one unpacked fixed64).
        good = (length_delimited(1, b"u1") + bytes([0x11])
                + (7).to_bytes(8, "little"))
        bad = length_delimited(1, b"u2") + length_delimited(3, NOT_UTF8)
        request = length_delimited(2, good) + length_delimited(2, bad)
        self.assert_refused(
            self.method("RecordExposure"), request,
            "exposure.v1.RecordExposureRequest: not a valid protobuf message: "
            "exposures[1].item_keys[0]: invalid UTF-8 in a string field")
        # GetUserStats{user_id: "u1"}: exists is field 5 of the response,
        # absent (false) when the user has no history.
        stats = self.call_raw(self.method("GetUserStats"),
                              length_delimited(2, b"u1"))
        self.assertNotIn(b"\x28\x01", stats)
        # The same batch without the bad exposure is accepted.
        self.call_raw(self.method("RecordExposure"), length_delimited(2, good))
        stats = self.call_raw(self.method("GetUserStats"),
                              length_delimited(2, b"u1"))
        self.assertIn(b"\x28\x01", stats)


if __name__ == "__main__":
    unittest.main()
