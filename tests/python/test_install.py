# SPDX-License-Identifier: MIT
"""The package as users install it: pip (offline, Debian's setuptools) and
make install, each imported from where it landed and run against a service."""
import os
import subprocess
import sys

import pytest

from conftest import TOP, BUILD

USE = r"""
import sys, dataplane as dp
assert dp.__file__.startswith(sys.argv[1]), dp.__file__
with dp.Client(sys.argv[2]) as c:
    a = c.alloc(4096); b = c.alloc(4096)
    c.export(b, "t/inst"); s = c.open("t/inst")
    memoryview(a)[:2] = b"ok"
    assert c.queue().run([(a, 0, s, 0, 2)]) == 1
    m = memoryview(b); assert bytes(m[:2]) == b"ok"; m.release()
print("ok")
"""


def run_from(path, sock):
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run([sys.executable, "-c", USE, path, sock], env=env, cwd="/",
                          capture_output=True, text=True, timeout=60)


def test_pip_install_offline(service, tmp_path):
    import importlib.util
    for m in ("pip", "setuptools"):
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"no {m} for {sys.executable}")
    target = str(tmp_path / "site")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-index", "--no-cache-dir", "--quiet", "--target", target,
                        os.path.join(TOP, "libclient", "python")],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert any(f.endswith(".abi3.so") for f in os.listdir(os.path.join(target, "dataplane")))
    r = run_from(target, service.sock)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_make_install_destdir(service, tmp_path):
    dest = str(tmp_path / "dest")
    ver = "%d.%d" % sys.version_info[:2]
    p = subprocess.run(["make", "-s", "--no-print-directory", f"B={BUILD}", f"PYTHON={sys.executable}",
                        "install", f"DESTDIR={dest}"], cwd=TOP, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    site = os.path.join(dest, "usr/local/lib", f"python{ver}", "dist-packages")
    for f in ("__init__.py", "mooncake.py", "_dataplane.abi3.so", "__init__.pyi", "py.typed"):
        assert os.path.exists(os.path.join(site, "dataplane", f)), f
    r = run_from(site, service.sock)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
