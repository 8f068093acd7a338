# SPDX-License-Identifier: MIT
"""Fixtures of the Python suite: real dataplaned processes, started from
$DP_BUILD (make test sets it) like tests/helpers_service.c starts them: a temp dir,
its socket there, --spin-us 20 (two cores shared with the tests), killed if
the test process dies (PR_SET_PDEATHSIG)."""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DP_BUILD", os.path.join(TOP, "build"))


def _pdeathsig():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Service:
    """One dataplaned; .sock is its socket, .log its log file."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="dp-pytest-")
        self.sock = os.path.join(self.dir, "dp.sock")
        self.log = os.path.join(self.dir, "dataplaned.log")
        argv = [os.path.join(BUILD, "dataplaned"), "--socket", self.sock, "--log-level",
                "debug", "--spin-us", "20", "--provider", "none", "--no-stats", *extra]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, preexec_fn=_pdeathsig)
        for _ in range(500):
            if self._can_connect():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        self.dump()
        self.kill()
        raise RuntimeError(f"dataplaned did not start: {argv}")

    def _can_connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(self.sock)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def dump(self):
        try:
            with open(self.log) as f:
                sys.stderr.write("".join("  [dataplaned] " + l for l in f))
        except OSError:
            pass

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """SIGTERM; returns the exit status (0 expected)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        if rc != 0:
            self.dump()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def service():
    s = Service()
    yield s
    if s.alive():
        assert s.stop() == 0, "dataplaned did not exit cleanly"
    else:
        s.kill()


@pytest.fixture
def client(service):
    import dataplane
    c = dataplane.Client(service.sock, name="pytest")
    yield c
    import gc
    gc.collect()
    try:
        c.close()
    except dataplane.RegionInUseError:
        pass


@pytest.fixture
def make_service():
    made = []

    def make(*extra):
        s = Service(*extra)
        made.append(s)
        return s
    yield make
    for s in made:
        if s.alive():
            s.stop()
        else:
            s.kill()


def run_python(code, env_extra=None, timeout=60):
    """Runs code in a fresh interpreter with this suite's dataplane on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout)


# ---- two services, and the Mooncake shim (tests/python/test_mooncake_*.py) ----

@pytest.fixture(params=["same-host", "fabric"])
def service_pair(request, tmp_path):
    """Two dataplaned speaking tcp as peers: with same-host sockets (their
    clients' sessions are mapped across), or --no-same-host (the fabric, as
    between hosts)."""
    made = []
    try:
        for side in ("a", "b"):
            path = (["--same-host-socket", str(tmp_path / f"{side}.peer")]
                    if request.param == "same-host" else ["--no-same-host"])
            made.append(Service("--provider", "tcp", "--server-name", "127.0.0.1", *path))
        yield tuple(made)
    finally:
        for s in made:
            if s.alive():
                assert s.stop() == 0, "dataplaned did not exit cleanly"
            else:
                s.kill()


@pytest.fixture(scope="session")
def mooncake_shim(tmp_path_factory):
    """A directory with the mooncake shim installed by its one command."""
    target = str(tmp_path_factory.mktemp("shim"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, "-m", "dataplane.shims", "install", "mooncake",
                        "--target", target], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return target


@pytest.fixture(params=["dataplane.mooncake", "mooncake.engine"])
def mooncake_import(request, mooncake_shim):
    """How role processes import TransferEngine: dataplane.mooncake, or
    Mooncake's own path through the shim. Returns (module, extra PYTHONPATH)."""
    return request.param, mooncake_shim if request.param == "mooncake.engine" else None
