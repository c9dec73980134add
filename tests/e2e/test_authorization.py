"""Per-RPC authorization by client certificate identity and the audit of
admin RPCs, through real mutual-TLS handshakes with the real
exposure-filter-server binary.

Every certificate is generated at test time with Debian's openssl: a test
CA; a server certificate for 127.0.0.1; three client certificates from that
CA, one per role, each identified differently (a SPIFFE URI SAN, a DNS SAN,
a subject CN); a "stranger" from the same CA whom the policy grants nothing;
"impostors" from the same CA whose names are spelled like a granted name
but typed differently (an e-mail and a URI SAN spelled as the writer's DNS
name, a DNS SAN spelled as the reader's SPIFFE ID); and a second CA with a
client certificate carrying the admin's very CN, which must be refused at
the handshake.

Run by ctest as e2e_python_authorization. By hand (from tests/e2e/):
  EF_E2E_SERVER=../../build/src/server/exposure-filter-server \\
      /usr/bin/python3 -m unittest -v test_authorization
"""

import os

# See test_e2e.py: lets the Python client notice closed connections quickly.
os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import hashlib  # pylint: disable=wrong-import-position
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

import grpc

import reflection_client as rc
import server_harness as harness

SERVICE = "exposure.v1.ExposureFilter"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING_WIRE = b"\x08\x01"
# A refused handshake must end in UNAVAILABLE, not hang; generous so a slow
# (ASan, loaded) handshake is not mistaken for a hang (as test_tls).
RPC_TIMEOUT_S = 60.0

READER_URI = "spiffe://example.test/ns/recall/sa/recall-server"
WRITER_DNS = "exposure-logger.example.test"
ADMIN_CN = "oncall-admin"

POLICY = """\
# exposure-filter authorization policy (test)
read   uri:%s
write  dns:%s
admin  cn:%s
""" % (READER_URI, WRITER_DNS, ADMIN_CN)

# Which role each RPC needs (src/server/security/rpc_roles.cc).
ROLE_OF = {
    "FilterRecalled": "read", "GetFilter": "read", "GetUserStats": "read",
    "Explain": "read", "RecordExposure": "write", "DeleteUser": "admin",
    "AddTracedUsers": "admin", "RemoveTracedUsers": "admin",
    "ListTracedUsers": "admin", "GetServerStats": "admin",
}
ADMIN_RPCS = sorted(r for r, role in ROLE_OF.items() if role == "admin")


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Pki:
    """A throwaway PKI in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ef_authz_")
        self._ca("ca")
        self._ca("foreign-ca")
        self._leaf("server", "ca", "serverAuth", "IP:127.0.0.1,DNS:localhost")
        self._leaf("reader", "ca", "clientAuth", "URI:" + READER_URI,
                   cn="recall-server-7f9c")
        self._leaf("writer", "ca", "clientAuth", "DNS:" + WRITER_DNS,
                   cn="exposure-logger")
        self._leaf("admin", "ca", "clientAuth", cn=ADMIN_CN)
        self._leaf("stranger", "ca", "clientAuth", "DNS:stranger.example.test",
                   cn="stranger")
        # A granted name under another subjectAltName type grants nothing.
        self._leaf("email-as-writer", "ca", "clientAuth", "email:" + WRITER_DNS,
                   cn="impostor")
        self._leaf("uri-as-writer", "ca", "clientAuth", "URI:" + WRITER_DNS,
                   cn="impostor")
        self._leaf("dns-as-reader", "ca", "clientAuth", "DNS:" + READER_URI,
                   cn="impostor")
        # The admin's name, signed by a CA the server does not trust.
        self._leaf("foreign-admin", "foreign-ca", "clientAuth", cn=ADMIN_CN)
        self.write("policy", POLICY)

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def _ca(self, name):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                "-subj", "/CN=exposure-filter test %s" % name,
                "-keyout", name + ".key", "-out", name + ".pem", cwd=self.dir)

    def _leaf(self, name, ca, usage, san=None, cn=None):
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes",
                "-subj", "/CN=%s" % (cn or name),
                "-keyout", name + ".key", "-out", name + ".csr", cwd=self.dir)
        ext = ["basicConstraints=CA:FALSE", "extendedKeyUsage=" + usage]
        if san:
            ext.append("subjectAltName=" + san)
        self.write(name + ".ext", "\n".join(ext) + "\n")
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem",
                "-CAkey", ca + ".key", "-CAcreateserial", "-days", "2",
                "-extfile", name + ".ext", "-out", name + ".pem", cwd=self.dir)

    def credentials(self, client):
        return grpc.ssl_channel_credentials(
            root_certificates=self.read("ca.pem"),
            private_key=self.read(client + ".key"),
            certificate_chain=self.read(client + ".pem"))

    def mtls_flags(self):
        return ["--tls_cert=" + self.path("server.pem"),
                "--tls_key=" + self.path("server.key"),
                "--tls_client_ca=" + self.path("ca.pem")]

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def health_check(channel):
    check = channel.unary_unary(HEALTH_CHECK, request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    return check(b"", timeout=RPC_TIMEOUT_S)


def denied_total(admin_port, rpc, role):
    url = "http://127.0.0.1:%d/metrics" % admin_port
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    want = 'exposure_filter_rpcs_denied_total{rpc="%s",role="%s"} ' % (rpc,
                                                                       role)
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    raise AssertionError("no %s in /metrics:\n%s" % (want, text))


def audit_lines(log, rpc=None):
    lines = [l for l in log.splitlines() if "event=audit " in l]
    if rpc is not None:
        lines = [l for l in lines if " rpc=%s " % rpc in l]
    return lines


class AuthorizationServerTest(unittest.TestCase):
    """One server with mTLS and the three-role policy for the class."""

    EXTRA_FLAGS = ()

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        cls.server = harness.ServerProcess(
            *(cls.pki.mtls_flags() +
              ["--authz_policy=" + cls.pki.path("policy")] +
              list(cls.EXTRA_FLAGS)),
            channel_credentials=cls.pki.credentials("admin"))
        try:
            cls.server.start()
            with cls.server.channel() as channel:
                with rc.ReflectionClient(channel) as refl:
                    cls.pool = refl.pool_for_symbols([SERVICE])
        except BaseException:
            cls.server.close()
            cls.pki.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.close()
        cls.pki.close()

    def call(self, identity, rpc, **fields):
        with self.server.channel(self.pki.credentials(identity)) as channel:
            ef = rc.DynamicService(channel, self.pool, SERVICE)
            if rpc == "RecordExposure" and "exposures" in fields:
                exposure = ef.message_class("exposure.v1.Exposure")
                fields["exposures"] = [exposure(**e)
                                       for e in fields["exposures"]]
            return ef.call(rpc, **fields)

    def request_fields(self, rpc, user):
        return {
            "RecordExposure": {"exposures": [{"user_id": user,
                                              "item_ids": [1, 2]}]},
            "FilterRecalled": {"user_id": user, "candidate_ids": [1, 3]},
            "GetFilter": {"user_id": user},
            "GetUserStats": {"user_id": user},
            "Explain": {"user_id": user, "item_ids": [1]},
            "DeleteUser": {"user_id": user, "surface": "homefeed"},
            "AddTracedUsers": {"user_ids": [user]},
            "RemoveTracedUsers": {"user_ids": [user]},
            "ListTracedUsers": {},
            "GetServerStats": {},
        }[rpc]


class RoleTest(AuthorizationServerTest):

    def test_each_identity_may_call_exactly_its_rpcs(self):
        for identity, role in (("reader", "read"), ("writer", "write"),
                               ("admin", "admin")):
            for rpc, needed in sorted(ROLE_OF.items()):
                with self.subTest(identity=identity, rpc=rpc):
                    fields = self.request_fields(rpc, "u-" + identity)
                    if needed == role:
                        self.call(identity, rpc, **fields)  # raises if not OK
                        continue
                    with self.assertRaises(grpc.RpcError) as caught:
                        self.call(identity, rpc, **fields)
                    e = caught.exception
                    self.assertEqual(e.code(),
                                     grpc.StatusCode.PERMISSION_DENIED,
                                     e.details())
                    self.assertIn('%s needs role "%s"' % (rpc, needed),
                                  e.details())
                    # Never who does hold a role: only the caller's own
                    # identity may appear.
                    for other in (READER_URI, WRITER_DNS, ADMIN_CN):
                        if other not in self.own_identities(identity):
                            self.assertNotIn(other, e.details())

    @staticmethod
    def own_identities(identity):
        return {"reader": (READER_URI,), "writer": (WRITER_DNS,),
                "admin": (ADMIN_CN,)}[identity]

    def test_denial_names_the_callers_own_identity_only(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.call("writer", "DeleteUser", user_id="x")
        details = caught.exception.details()
        self.assertEqual(details,
                         'DeleteUser needs role "admin"; the client '
                         'certificate (dns:%s) is not granted it' % WRITER_DNS)

    def test_identity_the_policy_does_not_name_may_call_nothing(self):
        for rpc in sorted(ROLE_OF):
            with self.subTest(rpc=rpc):
                with self.assertRaises(grpc.RpcError) as caught:
                    self.call("stranger", rpc,
                              **self.request_fields(rpc, "u-stranger"))
                self.assertEqual(caught.exception.code(),
                                 grpc.StatusCode.PERMISSION_DENIED)

    def test_names_typed_differently_from_the_grant_are_denied(self):
        # Each impostor's name is spelled exactly as a granted one; only
        # its subjectAltName type differs.
        for identity, rpc, own in (
                ("email-as-writer", "RecordExposure", "email:" + WRITER_DNS),
                ("uri-as-writer", "RecordExposure", "uri:" + WRITER_DNS),
                ("dns-as-reader", "FilterRecalled", "dns:" + READER_URI)):
            with self.subTest(identity=identity):
                with self.assertRaises(grpc.RpcError) as caught:
                    self.call(identity, rpc,
                              **self.request_fields(rpc, "u-impostor"))
                e = caught.exception
                self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED,
                                 e.details())
                self.assertIn("the client certificate (%s)" % own,
                              e.details())

    def test_health_and_reflection_stay_open(self):
        with self.server.channel(self.pki.credentials("stranger")) as channel:
            self.assertEqual(health_check(channel), SERVING_WIRE)
            with rc.ReflectionClient(channel) as refl:
                self.assertIn(SERVICE, refl.list_services())

    def test_certificate_from_another_ca_is_refused_at_the_handshake(self):
        # Same CN as the admin: the name is worth nothing without our CA.
        with self.server.channel(
                self.pki.credentials("foreign-admin")) as channel:
            with self.assertRaises(grpc.RpcError) as caught:
                health_check(channel)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE,
                         caught.exception.details())

    def test_denials_are_counted_by_rpc_and_role(self):
        port = self.server.admin_port
        before = denied_total(port, "DeleteUser", "admin")
        before_write = denied_total(port, "RecordExposure", "write")
        for _ in range(3):
            with self.assertRaises(grpc.RpcError):
                self.call("reader", "DeleteUser", user_id="m")
        with self.assertRaises(grpc.RpcError):
            self.call("reader", "RecordExposure",
                      **self.request_fields("RecordExposure", "m"))
        self.assertEqual(denied_total(port, "DeleteUser", "admin"), before + 3)
        self.assertEqual(denied_total(port, "RecordExposure", "write"),
                         before_write + 1)

    def test_startup_log_says_authorization_is_on(self):
        self.assertRegex(
            self.server.log(),
            r'event=authorization mode=on policy="%s" identities=3 tls=mtls'
            % re.escape(self.pki.path("policy")))


class AuditTest(AuthorizationServerTest):

    def test_every_admin_call_writes_one_audit_line(self):
        user = "audited-user-1"
        for rpc in ADMIN_RPCS:
            self.call("admin", rpc, **self.request_fields(rpc, user))
        log = self.server.log()
        for rpc in ADMIN_RPCS:
            with self.subTest(rpc=rpc):
                lines = [l for l in audit_lines(log, rpc)
                         if "outcome=OK" in l]
                self.assertEqual(len(lines), 1, "\n".join(audit_lines(log)))
                line = lines[0]
                self.assertIn('identity="cn:%s"' % ADMIN_CN, line)
                self.assertRegex(line, r' peer="ipv(4|6):[^"]+" ')
        self.assertIn(
            'rpc=DeleteUser identity="cn:%s"' % ADMIN_CN,
            audit_lines(log, "DeleteUser")[0])
        delete = [l for l in audit_lines(log, "DeleteUser") if user in l][0]
        self.assertRegex(delete, r' surface="homefeed" users="%s" outcome=OK$'
                         % user)
        add = [l for l in audit_lines(log, "AddTracedUsers") if user in l][0]
        self.assertIn(' surface=- users="%s" outcome=OK' % user, add)
        stats = audit_lines(log, "GetServerStats")[0]
        self.assertIn(" surface=- users=- outcome=OK", stats)

    def test_refused_admin_call_is_audited_with_its_outcome(self):
        with self.assertRaises(grpc.RpcError):
            self.call("reader", "ListTracedUsers")
        lines = [l for l in audit_lines(self.server.log(), "ListTracedUsers")
                 if "PERMISSION_DENIED" in l]
        self.assertEqual(len(lines), 1, self.server.log())
        self.assertIn(
            'rpc=ListTracedUsers identity="uri:%s" peer=- surface=- users=- '
            'outcome=PERMISSION_DENIED detail=' % READER_URI, lines[0])

    def test_failed_admin_call_is_audited_with_its_code(self):
        # Allowed, but the request is bad: the audit says how it ended.
        with self.assertRaises(grpc.RpcError) as caught:
            self.call("admin", "DeleteUser", user_id="")
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)
        lines = [l for l in audit_lines(self.server.log(), "DeleteUser")
                 if "outcome=INVALID_ARGUMENT" in l]
        self.assertEqual(len(lines), 1, self.server.log())
        self.assertIn(' users="" outcome=INVALID_ARGUMENT detail="', lines[0])

    def test_data_plane_calls_are_not_audited(self):
        self.call("writer", "RecordExposure",
                  **self.request_fields("RecordExposure", "not-audited"))
        self.call("reader", "FilterRecalled",
                  **self.request_fields("FilterRecalled", "not-audited"))
        self.assertNotIn("not-audited", self.server.log())


class HashedAuditTest(AuthorizationServerTest):
    EXTRA_FLAGS = ("--audit_hash_user_ids",)

    def test_audit_lines_carry_user_id_hashes(self):
        user = "user-whose-id-stays-out-of-logs"
        self.call("admin", "AddTracedUsers", user_ids=[user])
        log = self.server.log()
        self.assertNotIn(user, log)
        digest = hashlib.sha256(user.encode()).hexdigest()[:16]
        lines = audit_lines(log, "AddTracedUsers")
        self.assertEqual(len(lines), 1, log)
        self.assertIn('users="sha256:%s" outcome=OK' % digest, lines[0])


class CliOverMutualTlsTest(AuthorizationServerTest):
    """exposure-filter-cli --tls_ca/--tls_cert/--tls_key/--tls_server_name:
    what the Kubernetes exec probes run (deploy/mtls), and an operator's
    client."""

    def cli(self, identity, *args):
        binary = os.environ.get("EF_E2E_CLI")
        if not binary:
            self.skipTest("EF_E2E_CLI is not set")
        argv = [binary] + list(args) + [
            "--address", "127.0.0.1:%d" % self.server.port,
            "--tls_ca", self.pki.path("ca.pem"),
            "--tls_server_name", "localhost"]
        if identity:
            argv += ["--tls_cert", self.pki.path(identity + ".pem"),
                     "--tls_key", self.pki.path(identity + ".key")]
        return subprocess.run(argv, capture_output=True, timeout=60,
                              env=harness.server_env())

    def test_health_probe_with_any_certificate_of_the_ca(self):
        p = self.cli("stranger", "health")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_admin_command_needs_the_admin_certificate(self):
        self.assertEqual(self.cli("admin", "stats").returncode, 0)
        p = self.cli("reader", "stats")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b'PermissionDenied: GetServerStats needs role "admin"',
                      p.stderr)

    def test_no_client_certificate_fails_the_handshake(self):
        p = self.cli(None, "health")
        self.assertEqual(p.returncode, 3, p.stderr)

    def test_unreadable_tls_file_is_a_usage_error(self):
        binary = os.environ.get("EF_E2E_CLI")
        if not binary:
            self.skipTest("EF_E2E_CLI is not set")
        p = subprocess.run([binary, "health", "--tls_ca", "/nonexistent.pem"],
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"--tls_ca=/nonexistent.pem: cannot read", p.stderr)


class AuthorizationOffTest(unittest.TestCase):
    """The quick start: plaintext, no policy, every RPC open, audit on."""

    def test_plaintext_startup_logs_authorization_off_in_one_line(self):
        with harness.ServerProcess() as server:
            with server.channel() as channel:
                with rc.ReflectionClient(channel) as refl:
                    pool = refl.pool_for_symbols([SERVICE])
                ef = rc.DynamicService(channel, pool, SERVICE)
                ef.call("DeleteUser", user_id="plain-user")
                ef.call("GetServerStats")
            log = server.log()
        off = [l for l in log.splitlines() if "event=authorization " in l]
        self.assertEqual(len(off), 1, log)
        self.assertIn("event=authorization mode=off tls=plaintext", off[0])
        self.assertIn("every client that can connect may call every RPC",
                      off[0])
        lines = audit_lines(log, "DeleteUser")
        self.assertEqual(len(lines), 1, log)
        self.assertIn('identity="-"', lines[0])
        self.assertIn('users="plain-user" outcome=OK', lines[0])


class AuthorizationOffWithMutualTlsTest(unittest.TestCase):
    """mTLS without a policy starts with authorization off; that is logged
    at error level, so even --log_level=error shows it."""

    def test_mtls_without_policy_is_an_error_line(self):
        pki = Pki()
        try:
            with harness.ServerProcess(
                    *(pki.mtls_flags() + ["--log_level=error"]),
                    channel_credentials=pki.credentials("admin")) as server:
                log = server.log()
        finally:
            pki.close()
        off = [l for l in log.splitlines() if "event=authorization " in l]
        self.assertEqual(len(off), 1, log)
        self.assertIn("level=error event=authorization mode=off tls=mtls",
                      off[0])
        self.assertIn("DeleteUser included", off[0])


class AuthorizationStartupErrorTest(unittest.TestCase):
    """A policy that cannot be enforced stops the server at startup."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()

    @classmethod
    def tearDownClass(cls):
        cls.pki.close()

    def assertStartupFails(self, flags, *expected):
        code, out = harness.run_to_exit(*flags)
        self.assertEqual(code, 1, out)
        for text in expected:
            self.assertIn(text, out)
        self.assertNotIn("event=serving", out)

    def test_bad_policy_line_is_named(self):
        bad = self.pki.write("bad-policy",
                             "# ops\nread dns:a.example\nadmn cn:ops\n")
        self.assertStartupFails(
            self.pki.mtls_flags() + ["--authz_policy=" + bad],
            '--authz_policy=%s line 3: unknown role "admn" '
            '(roles: read, write, admin)' % bad)

    def test_identity_without_kind_is_named(self):
        bad = self.pki.write("bad-identity", "write logger.example\n")
        self.assertStartupFails(
            self.pki.mtls_flags() + ["--authz_policy=" + bad],
            "--authz_policy=%s line 1: identity \"logger.example\" must be "
            "dns:<name>, uri:<uri>, email:<address>, ip:<address> or "
            "cn:<common name>" % bad)

    def test_untyped_san_is_refused_naming_the_typed_form(self):
        bad = self.pki.write("untyped-san", "read cn:ops\nwrite san:%s\n"
                             % WRITER_DNS)
        self.assertStartupFails(
            self.pki.mtls_flags() + ["--authz_policy=" + bad],
            '--authz_policy=%s line 2: identity "san:%s" does not say which '
            'subjectAltName type it is; write "dns:%s"'
            % (bad, WRITER_DNS, WRITER_DNS))

    def test_missing_policy_file(self):
        missing = self.pki.path("missing-policy")
        self.assertStartupFails(
            self.pki.mtls_flags() + ["--authz_policy=" + missing],
            "--authz_policy=%s: cannot read: No such file" % missing)

    def test_policy_with_plaintext_is_refused(self):
        self.assertStartupFails(
            ["--authz_policy=" + self.pki.path("policy")],
            "needs mutual TLS", "the serving port is plaintext")

    def test_policy_with_tls_but_no_client_ca_is_refused(self):
        self.assertStartupFails(
            ["--tls_cert=" + self.pki.path("server.pem"),
             "--tls_key=" + self.pki.path("server.key"),
             "--authz_policy=" + self.pki.path("policy")],
            "needs mutual TLS", "the serving port is tls,")

    def test_environment_sets_the_policy(self):
        code, out = harness.run_to_exit(
            env={"EXPOSURE_FILTER_AUTHZ_POLICY": self.pki.path("policy")})
        self.assertEqual(code, 1, out)
        self.assertIn("--authz_policy=%s needs mutual TLS"
                      % self.pki.path("policy"), out)


if __name__ == "__main__":
    unittest.main()
