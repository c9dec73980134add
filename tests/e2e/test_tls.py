"""TLS and mutual TLS on the serving port, through real handshakes: the real
exposure-filter-server binary with --tls_cert/--tls_key/--tls_client_ca and
Python grpc clients with grpc.ssl_channel_credentials.

Every certificate is generated at test time with Debian's openssl into a
temporary directory: a test CA, a server certificate for 127.0.0.1/localhost,
a client certificate from the same CA, and a "rogue" CA with its own client
certificate that the server must not accept.

Run by ctest as e2e_python_tls. By hand (from tests/e2e/):
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \
      /usr/bin/python3 -m unittest -v test_tls
"""

import os

# See test_e2e.py: lets the Python client notice closed connections quickly.
os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import shutil  # pylint: disable=wrong-import-position
import subprocess
import tempfile
import unittest
import urllib.request

import grpc

import reflection_client as rc
import server_harness as harness

SERVICE = "exposure.v1.ExposureFilter"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING_WIRE = b"\x08\x01"  # HealthCheckResponse{status: SERVING}
# A refused handshake must fail, not hang: the client's connection attempt
# ends in UNAVAILABLE, a hang in DEADLINE_EXCEEDED after this. Generous, so
# a slow (ASan, loaded) handshake is not mistaken for a hang.
RPC_TIMEOUT_S = 60.0


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class TestPki:
    """A throwaway PKI in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ef_tls_")
        self._ca("ca")
        self._ca("rogue-ca")
        self._leaf("server", "ca", "serverAuth",
                   "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self._leaf("client", "ca", "clientAuth")
        self._leaf("rogue-client", "rogue-ca", "clientAuth")
        with open(self.path("not-pem.pem"), "w") as f:
            f.write("this is not a PEM file\n")

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def _ca(self, name):
        # EC P-256 keys: generated in milliseconds, unlike RSA.
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=exposure-filter test %s" % name,
                "-keyout", name + ".key", "-out", name + ".pem", cwd=self.dir)

    def _leaf(self, name, ca, usage, san=None):
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes",
                "-subj", "/CN=exposure-filter test %s" % name,
                "-keyout", name + ".key", "-out", name + ".csr", cwd=self.dir)
        ext = ["basicConstraints=CA:FALSE", "extendedKeyUsage=" + usage]
        if san:
            ext.append(san)
        with open(self.path(name + ".ext"), "w") as f:
            f.write("\n".join(ext) + "\n")
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem",
                "-CAkey", ca + ".key", "-CAcreateserial", "-days", "2",
                "-extfile", name + ".ext", "-out", name + ".pem", cwd=self.dir)

    def credentials(self, trust="ca", client=None):
        """Client credentials trusting `trust`'s certificate, presenting the
        `client` certificate if given."""
        kwargs = {"root_certificates": self.read(trust + ".pem")}
        if client:
            kwargs["private_key"] = self.read(client + ".key")
            kwargs["certificate_chain"] = self.read(client + ".pem")
        return grpc.ssl_channel_credentials(**kwargs)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def health_check(channel):
    """Raw grpc.health.v1 Check (no descriptors needed); returns the
    response bytes or raises grpc.RpcError."""
    check = channel.unary_unary(HEALTH_CHECK,
                                request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    return check(b"", timeout=RPC_TIMEOUT_S)


def handshake_failures(admin_port, reason):
    """exposure_filter_tls_handshake_failures_total{reason} from /metrics."""
    url = "http://127.0.0.1:%d/metrics" % admin_port
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    want = 'exposure_filter_tls_handshake_failures_total{reason="%s"} ' % reason
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    raise AssertionError("no %s in /metrics:\n%s" % (want, text))


class TlsTestCase(unittest.TestCase):
    """One PKI per test class, one server per test class."""

    SERVER_FLAGS = ()  # relative to the PKI directory, formatted with it
    SERVER_CREDENTIALS = {"trust": "ca"}

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()
        flags = [f.format(pki=cls.pki.dir) for f in cls.SERVER_FLAGS]
        cls.server = harness.ServerProcess(
            *flags,
            channel_credentials=cls.pki.credentials(**cls.SERVER_CREDENTIALS))
        try:
            cls.server.start()
        except BaseException:
            cls.server.close()
            cls.pki.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.close()
        cls.pki.close()

    def assertServing(self, credentials):
        with self.server.channel(credentials) as channel:
            self.assertEqual(health_check(channel), SERVING_WIRE)

    def assertRefused(self, credentials=None, plaintext=False):
        """The connection cannot be used: the handshake fails (or, for a
        plaintext client, the server never answers in HTTP/2 cleartext)."""
        channel = (grpc.insecure_channel(self.server.address) if plaintext
                   else self.server.channel(credentials))
        with channel:
            with self.assertRaises(grpc.RpcError) as caught:
                health_check(channel)
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.UNAVAILABLE,
                         caught.exception.details())


class TlsServerTest(TlsTestCase):
    SERVER_FLAGS = ("--tls_cert={pki}/server.pem", "--tls_key={pki}/server.key")

    def test_client_trusting_the_ca_is_served(self):
        self.assertServing(self.pki.credentials(trust="ca"))

    def test_every_rpc_works_over_tls_through_reflection(self):
        # Reflection (a streaming RPC) and an exposure.v1 round trip: TLS
        # carries the whole API, not only health.
        with self.server.channel(self.pki.credentials()) as channel:
            with rc.ReflectionClient(channel) as refl:
                self.assertIn(SERVICE, refl.list_services())
                pool = refl.pool_for_symbols([SERVICE])
            ef = rc.DynamicService(channel, pool, SERVICE)
            exposure = ef.message_class("exposure.v1.Exposure")
            resp = ef.call("RecordExposure", exposures=[
                exposure(user_id="tls-user", item_ids=[7, 8])])
            self.assertEqual(resp.items_recorded, 2)
            resp = ef.call("FilterRecalled", user_id="tls-user",
                           candidate_ids=[7, 9])
            self.assertEqual(list(resp.kept_ids), [9])

    def test_plaintext_client_is_refused(self):
        self.assertRefused(plaintext=True)

    def test_client_trusting_another_ca_is_refused(self):
        self.assertRefused(self.pki.credentials(trust="rogue-ca"))

    def test_client_certificate_is_not_needed_without_client_ca(self):
        self.assertServing(self.pki.credentials(client="client"))

    def test_startup_log_names_the_mode(self):
        self.assertIn("tls=tls", self.server.log())


class MutualTlsServerTest(TlsTestCase):
    SERVER_FLAGS = ("--tls_cert={pki}/server.pem", "--tls_key={pki}/server.key",
                    "--tls_client_ca={pki}/ca.pem")
    SERVER_CREDENTIALS = {"trust": "ca", "client": "client"}

    def test_client_with_certificate_from_the_ca_is_served(self):
        self.assertServing(self.pki.credentials(client="client"))

    def test_client_without_certificate_is_refused(self):
        self.assertRefused(self.pki.credentials())

    def test_client_with_certificate_from_another_ca_is_refused(self):
        self.assertRefused(self.pki.credentials(client="rogue-client"))

    def test_plaintext_client_is_refused(self):
        self.assertRefused(plaintext=True)

    def test_startup_log_names_the_mode(self):
        self.assertIn("tls=mtls", self.server.log())


class RefusedHandshakeTest(TlsTestCase):
    """Refused handshakes are counted by reason on /metrics and logged.
    gRPC's client may try a refused connection more than once before the
    call fails, hence "at least one more"; a reason no client caused must
    not move at all."""
    SERVER_FLAGS = MutualTlsServerTest.SERVER_FLAGS
    SERVER_CREDENTIALS = MutualTlsServerTest.SERVER_CREDENTIALS
    REASONS = ("no_client_certificate", "certificate_rejected", "not_tls",
               "client_alert", "protocol_mismatch", "other")

    def counts(self):
        return {r: handshake_failures(self.server.admin_port, r)
                for r in self.REASONS}

    def assertOnlyMoved(self, before, reason):
        after = self.counts()
        for r in self.REASONS:
            if r == reason:
                self.assertGreaterEqual(after[r], before[r] + 1, after)
            else:
                self.assertEqual(after[r], before[r], (r, after))

    def test_certificate_from_another_ca_is_counted_and_logged(self):
        before = self.counts()
        self.assertRefused(self.pki.credentials(client="rogue-client"))
        self.assertOnlyMoved(before, "certificate_rejected")
        self.assertIn(
            "event=tls_handshake_refused reason=certificate_rejected "
            'error="SSL_ERROR_SSL: error:0A000086:SSL routines::certificate '
            'verify failed"', self.server.log())

    def test_missing_client_certificate_is_counted(self):
        before = self.counts()
        self.assertRefused(self.pki.credentials())
        self.assertOnlyMoved(before, "no_client_certificate")

    def test_plaintext_client_is_counted(self):
        before = self.counts()
        self.assertRefused(plaintext=True)
        self.assertOnlyMoved(before, "not_tls")

    def test_served_client_moves_no_counter(self):
        before = self.counts()
        self.assertServing(self.pki.credentials(client="client"))
        self.assertEqual(self.counts(), before)


class OptionalClientCertificateTest(TlsTestCase):
    """--tls_require_client_cert=false: certificates are verified when
    presented, but not demanded."""
    SERVER_FLAGS = ("--tls_cert={pki}/server.pem", "--tls_key={pki}/server.key",
                    "--tls_client_ca={pki}/ca.pem",
                    "--tls_require_client_cert=false")

    def test_client_without_certificate_is_served(self):
        self.assertServing(self.pki.credentials())

    def test_client_with_valid_certificate_is_served(self):
        self.assertServing(self.pki.credentials(client="client"))

    def test_client_with_certificate_from_another_ca_is_refused(self):
        self.assertRefused(self.pki.credentials(client="rogue-client"))


class TlsStartupErrorTest(unittest.TestCase):
    """Bad TLS configuration stops the server at startup with a message
    naming the flag and the file; it never serves plaintext instead."""

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()

    @classmethod
    def tearDownClass(cls):
        cls.pki.close()

    def assertStartupFails(self, flags, *expected, env=None):
        code, out = harness.run_to_exit(*flags, env=env)
        self.assertNotEqual(code, 0, out)
        for text in expected:
            self.assertIn(text, out)
        self.assertNotIn("serving on", out)

    def test_missing_certificate_file(self):
        missing = self.pki.path("missing.pem")
        self.assertStartupFails(
            ["--tls_cert=" + missing, "--tls_key=" + self.pki.path("server.key")],
            "--tls_cert=" + missing, "cannot read: No such file or directory")

    def test_unreadable_key_file(self):
        # A directory opens but cannot be read as a file, also for root.
        self.assertStartupFails(
            ["--tls_cert=" + self.pki.path("server.pem"),
             "--tls_key=" + self.pki.dir],
            "--tls_key=" + self.pki.dir, "cannot read")

    def test_certificate_that_is_not_pem(self):
        self.assertStartupFails(
            ["--tls_cert=" + self.pki.path("not-pem.pem"),
             "--tls_key=" + self.pki.path("server.key")],
            "--tls_cert=" + self.pki.path("not-pem.pem"), "no PEM certificate")

    def test_key_that_is_not_a_key(self):
        # A certificate where the key should be.
        self.assertStartupFails(
            ["--tls_cert=" + self.pki.path("server.pem"),
             "--tls_key=" + self.pki.path("server.pem")],
            "--tls_key=" + self.pki.path("server.pem"), "private key")

    def test_key_of_another_certificate(self):
        self.assertStartupFails(
            ["--tls_cert=" + self.pki.path("server.pem"),
             "--tls_key=" + self.pki.path("client.key")],
            "--tls_key=" + self.pki.path("client.key"),
            "does not match the first certificate")

    def test_client_ca_that_is_not_pem(self):
        self.assertStartupFails(
            ["--tls_cert=" + self.pki.path("server.pem"),
             "--tls_key=" + self.pki.path("server.key"),
             "--tls_client_ca=" + self.pki.path("not-pem.pem")],
            "--tls_client_ca=" + self.pki.path("not-pem.pem"),
            "no PEM certificate")

    def test_certificate_without_key(self):
        self.assertStartupFails(["--tls_cert=" + self.pki.path("server.pem")],
                                "--tls_cert and --tls_key must be given "
                                "together")

    def test_client_ca_without_server_certificate(self):
        self.assertStartupFails(
            ["--tls_client_ca=" + self.pki.path("ca.pem")],
            "--tls_client_ca (mutual TLS) needs --tls_cert and --tls_key")

    def test_environment_variables_configure_tls(self):
        # EXPOSURE_FILTER_TLS_* reach the same checks as the flags (how the
        # Kubernetes ConfigMap sets them).
        missing = self.pki.path("missing.key")
        self.assertStartupFails(
            [], "--tls_key=" + missing, "cannot read",
            env={"EXPOSURE_FILTER_TLS_CERT": self.pki.path("server.pem"),
                 "EXPOSURE_FILTER_TLS_KEY": missing})


if __name__ == "__main__":
    unittest.main()
