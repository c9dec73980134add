"""Starts the real exposure-filter-server binary on a free port and waits for
it to report SERVING on grpc.health.v1.Health/Check.

Every server gets a fresh temporary --data_dir (removed on close) unless the
test passes its own (data_dir=..., e.g. to restart on the same state) or a
--data_dir flag; the binary's default ./data is never used by tests."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import grpc

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
# grpc.health.v1.HealthCheckResponse{status: SERVING} on the wire: field 1,
# varint, value 1. The readiness probe needs no descriptors; the tests check
# health again through dynamically built messages.
_SERVING_WIRE = b"\x08\x01"

# Upper bounds, not verdicts: waits end as soon as the server is ready or has
# exited. Generous for an ASan server on a loaded 2-core machine.
STARTUP_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 60.0


def server_binary():
    path = os.environ.get("EF_E2E_SERVER")
    if not path:
        raise RuntimeError("set EF_E2E_SERVER to the server binary "
                           "(ctest does this)")
    return path


def server_env(extra=None):
    """The test's environment without EXPOSURE_FILTER_* overrides (which
    would change the server's flags), plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EXPOSURE_FILTER_")}
    env.update(extra or {})
    return env


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One exposure-filter-server process. Use as a context manager, or call
    start() and always stop()/kill() in a finally/tearDown."""

    def __init__(self, *flags, env=None, data_dir=None,
                 channel_credentials=None, port=None):
        self.flags = list(flags)
        # A fixed port (a restarted replica must come back where its clients
        # dial it, as a StatefulSet pod keeps its DNS name); None: a free one.
        self._fixed_port = port
        self._own_data_dir = None
        if not any(f.startswith("--data_dir") for f in self.flags):
            if data_dir is None:
                self._own_data_dir = tempfile.mkdtemp(prefix="ef_e2e_data_")
                data_dir = self._own_data_dir
            self.flags.append("--data_dir=" + data_dir)
        self.data_dir = data_dir
        # grpc.ChannelCredentials for a TLS server (the readiness probe must
        # speak TLS too); None: plaintext.
        self.channel_credentials = channel_credentials
        self.env = server_env(env)
        self.port = None
        self.address = None
        self.admin_port = None
        self.proc = None
        self._log = tempfile.NamedTemporaryFile(
            prefix="ef_e2e_server_", suffix=".log", delete=False)
        self.log_path = self._log.name

    # --- lifecycle ------------------------------------------------------

    def spawn(self):
        """Starts the process (does not wait for readiness)."""
        self.port = self._fixed_port or free_port()
        self.address = "127.0.0.1:%d" % self.port
        argv = [server_binary(), "--listen=" + self.address] + self.flags
        # The admin (metrics) port defaults to 127.0.0.1:9464, which servers
        # running side by side would fight over: give each a free one.
        if not any(f.startswith("--admin_listen=") for f in self.flags):
            self.admin_port = free_port()
            argv.append("--admin_listen=127.0.0.1:%d" % self.admin_port)
        self.proc = subprocess.Popen(argv, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        return self

    def start(self):
        # A free port can be taken between our probe and the server's bind;
        # retry a few times with a new port in that case.
        for attempt in range(3):
            self.spawn()
            try:
                self.wait_ready()
                return self
            except _ExitedEarly:
                if attempt == 2 or "cannot listen" not in self.log():
                    raise
        return self

    def wait_ready(self, timeout=STARTUP_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise _ExitedEarly(
                    "server exited with %d before serving:\n%s"
                    % (self.proc.returncode, self.log()))
            # A fresh channel per attempt: a channel whose first connection
            # was refused sits in reconnect backoff, which the Python client
            # may only notice seconds later.
            with self.channel() as channel:
                check = channel.unary_unary(HEALTH_CHECK,
                                            request_serializer=lambda b: b,
                                            response_deserializer=lambda b: b)
                try:
                    # HealthCheckRequest{service: ""} is the empty message.
                    if check(b"", timeout=2.0) == _SERVING_WIRE:
                        return
                    last_error = "not SERVING yet"
                except grpc.RpcError as e:
                    last_error = "%s %s" % (e.code(), e.details())
            time.sleep(0.05)
        raise RuntimeError("server not SERVING within %.0fs (%s):\n%s"
                           % (timeout, last_error, self.log()))

    def channel(self, credentials=None, options=None):
        """A new channel to the server: with `credentials`, else the ones
        given at construction, else plaintext."""
        creds = credentials or self.channel_credentials
        if creds is None:
            return grpc.insecure_channel(self.address, options=options)
        return grpc.secure_channel(self.address, creds, options=options)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=EXIT_TIMEOUT_S):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        """SIGTERM, then SIGKILL if it does not exit in time. Idempotent."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.kill()
        self._log.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        if self._own_data_dir is not None:
            shutil.rmtree(self._own_data_dir, ignore_errors=True)

    def log(self):
        self._log.flush()
        with open(self.log_path, "r", errors="replace") as f:
            return f.read()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


class _ExitedEarly(RuntimeError):
    pass


def run_to_exit(*flags, env=None, timeout=EXIT_TIMEOUT_S):
    """Runs the binary expecting it to exit by itself (e.g. on a bad flag);
    returns (returncode, combined output)."""
    full_env = server_env(env)
    flags = list(flags)
    if not any(f.startswith("--listen=") for f in flags):
        flags.insert(0, "--listen=127.0.0.1:%d" % free_port())
    if not any(f.startswith("--admin_listen=") for f in flags):
        flags.insert(0, "--admin_listen=127.0.0.1:%d" % free_port())
    data_dir = None
    if not any(f.startswith("--data_dir") for f in flags):
        data_dir = tempfile.mkdtemp(prefix="ef_e2e_data_")
        flags.append("--data_dir=" + data_dir)
    argv = [server_binary()] + flags
    proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return proc.returncode, out.decode(errors="replace")
