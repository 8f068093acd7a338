# SPDX-License-Identifier: MIT
"""dataplane.nixl as its callers use it, each role its own process with its
own service: vLLM NixlConnector's pull (READ with a notification that P sees
after the bytes left it; heartbeats by send_notif) and NIXL's examples
(metadata through the listener, make_prepped_xfer READs, initialize_xfer
WRITEs from tuples and numpy N x 3, reposts, get_new_notifs), on one
service, two services of this host, and two services through the fabric
(tcp, --no-same-host); directly and through the nixl import shim."""
import os
import socket
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

TOPOLOGIES = ["one_service", "same_host", "fabric"]


def services(make_service, topology, tmp):
    if topology == "one_service":
        s = make_service()
        return s, s
    if topology == "same_host":
        return [make_service("--provider", "tcp", "--server-name", "127.0.0.1",
                             "--same-host-socket", os.path.join(tmp, f"{side}.peer"))
                for side in "ab"]
    return [make_service("--provider", "tcp", "--server-name", "127.0.0.1", "--no-same-host")
            for _ in "ab"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_roles(roles, env_extra=None, timeout=90):
    """Starts (role, service) pairs as processes; asserts each exits 0."""
    with tempfile.TemporaryDirectory(prefix="dp-nixl-") as d:
        with open(os.path.join(d, "port"), "w") as f:
            f.write(str(free_port()))
        procs = []
        for role, svc in roles:
            env = dict(os.environ, DP_SOCKET=svc.sock)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            env.update(env_extra or {})
            procs.append((role, subprocess.Popen(
                [sys.executable, os.path.join(HERE, "nixl_roles.py"), role, d], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        failed = []
        for role, p in procs:
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                failed.append(f"{role}: timed out\n{out}")
                continue
            if p.returncode:
                failed.append(f"{role}: exit {p.returncode}\n{out}")
        assert not failed, "\n".join(failed)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_vllm_pull_notification_and_heartbeats(make_service, topology, tmp_path):
    p, d = services(make_service, topology, str(tmp_path))
    run_roles([("vllm_producer", p), ("vllm_consumer", d)])


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_nixl_example_flows(make_service, topology, tmp_path):
    t, i = services(make_service, topology, str(tmp_path))
    run_roles([("example_target", t), ("example_initiator", i)])


@pytest.fixture
def shim_dir(tmp_path):
    d = tmp_path / "site"
    d.mkdir()
    r = subprocess.run([sys.executable, "-m", "dataplane.shim_nixl", "install", str(d)],
                       capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
    assert r.returncode == 0, r.stderr
    return str(d)


@pytest.mark.parametrize("topology", ["one_service", "fabric"])
def test_through_the_shim(make_service, topology, tmp_path, shim_dir):
    a, b = services(make_service, topology, str(tmp_path))
    env = {"NIXL_IMPORT": "nixl",
           "PYTHONPATH": os.pathsep.join([shim_dir] + [p for p in sys.path if p])}
    run_roles([("vllm_producer", a), ("vllm_consumer", b)], env)
    run_roles([("example_target", b), ("example_initiator", a)], env)
