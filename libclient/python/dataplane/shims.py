# SPDX-License-Identifier: MIT
"""Opt-in import shims: a small ``mooncake`` package whose
``mooncake.engine.TransferEngine`` is dataplane.mooncake's, so callers that
``from mooncake.engine import TransferEngine`` run on dataplane unchanged.

    python3 -m dataplane.shims install mooncake [--target DIR]
    python3 -m dataplane.shims uninstall mooncake [--target DIR]

DIR defaults to the user's site-packages (``python3 -m site --user-site``).
Installing refuses (exit status 1) when this interpreter can import a
``mooncake`` that is not the shim: a real Mooncake is never shadowed. The
shim itself warns at import when another ``mooncake`` is on sys.path.
"""

import argparse
import importlib.util
import os
import site
import sys

MARK = "__dataplane_shim__"

_INIT = '''# Installed by `python3 -m dataplane.shims install mooncake`; remove with
# `python3 -m dataplane.shims uninstall mooncake`. Not Mooncake: dataplane's
# TransferEngine under Mooncake's import path (dataplane docs/python.md).
__dataplane_shim__ = True

import os as _os
import sys as _sys
import warnings as _warnings

_here = _os.path.dirname(_os.path.abspath(__file__))


def _is_shim(d):
    try:
        with open(_os.path.join(d, "__init__.py")) as f:
            return "__dataplane_shim__" in f.read()
    except OSError:
        return False


for _p in _sys.path:
    _other = _os.path.join(_p or ".", "mooncake")
    if (_os.path.isdir(_other) and not _os.path.samefile(_other, _here)
            and not _is_shim(_other)):
        _warnings.warn(f"dataplane's mooncake shim ({_here}) hides or is hidden by another "
                       f"mooncake ({_other}); uninstall the shim: python3 -m dataplane.shims "
                       "uninstall mooncake", RuntimeWarning, stacklevel=2)
        break

# Mooncake's Store (mooncake.store, the registered buffer pools) is another
# product than its Transfer Engine: refused by name, with the reason.
_STORE_NAMES = ("BufferPool", "RegisteredBufferPool")


def __getattr__(name):
    if name in _STORE_NAMES:
        raise ImportError(
            f"mooncake.{name} belongs to Mooncake Store, a distributed KV cache that is a "
            "different product from Mooncake's Transfer Engine; dataplane's mooncake shim "
            "provides the Transfer Engine (mooncake.engine) only", name="mooncake")
    raise AttributeError(f"module 'mooncake' has no attribute {name!r}")
'''

_STORE = '''# dataplane's mooncake shim: Mooncake Store is not part of it.
raise ImportError(
    "mooncake.store is Mooncake Store, a distributed KV cache that is a different product "
    "from Mooncake's Transfer Engine; dataplane's mooncake shim provides the Transfer Engine "
    "(mooncake.engine) only", name="mooncake.store")
'''

_ENGINE = '''# dataplane's mooncake shim: mooncake.engine is dataplane.mooncake.
from dataplane.mooncake import *  # noqa: F401,F403
from dataplane.mooncake import (P2PHANDSHAKE, Read, TransferEngine, TransferNotify,  # noqa: F401
                                TransferOpcode, Write)
'''

SHIMS = {"mooncake": {"__init__.py": _INIT, "engine.py": _ENGINE, "store.py": _STORE}}


def _is_shim(pkg_dir):
    try:
        with open(os.path.join(pkg_dir, "__init__.py")) as f:
            return MARK in f.read()
    except OSError:
        return False


def _default_target():
    return site.getusersitepackages()


def install(name, target):
    """Writes the shim `name` into target; refuses when `name` imports from
    elsewhere and is not the shim. Returns an exit status."""
    files = SHIMS[name]
    dest = os.path.join(target, name)
    spec = importlib.util.find_spec(name)
    if spec is not None:
        where = (list(spec.submodule_search_locations or []) or [spec.origin])[0]
        if not (os.path.isdir(where) and _is_shim(where)):
            print(f"dataplane.shims: {name!r} is importable from {where}: a real {name} is "
                  "installed for this Python; the shim would hide it, so it is not installed",
                  file=sys.stderr)
            return 1
    if os.path.exists(dest) and not _is_shim(dest):
        print(f"dataplane.shims: {dest} exists and is not the shim; not touched",
              file=sys.stderr)
        return 1
    os.makedirs(dest, exist_ok=True)
    for fname, text in files.items():
        with open(os.path.join(dest, fname), "w") as f:
            f.write(text)
    print(f"dataplane.shims: installed {name} -> {dest}"
          + ("" if os.path.abspath(target) in map(os.path.abspath, sys.path)
             else f" (not on sys.path: PYTHONPATH={target})"))
    return 0


def uninstall(name, target):
    dest = os.path.join(target, name)
    if not os.path.isdir(dest):
        print(f"dataplane.shims: no {name} shim in {target}", file=sys.stderr)
        return 1
    if not _is_shim(dest):
        print(f"dataplane.shims: {dest} is not the shim; not touched", file=sys.stderr)
        return 1
    for fname in SHIMS[name]:
        try:
            os.unlink(os.path.join(dest, fname))
        except FileNotFoundError:
            pass
    pyc = os.path.join(dest, "__pycache__")
    if os.path.isdir(pyc):
        for f in os.listdir(pyc):
            os.unlink(os.path.join(pyc, f))
        os.rmdir(pyc)
    os.rmdir(dest)
    print(f"dataplane.shims: removed {dest}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m dataplane.shims",
                                 description="Opt-in import shims for dataplane.")
    ap.add_argument("action", choices=["install", "uninstall"])
    ap.add_argument("name", choices=sorted(SHIMS))
    ap.add_argument("--target", default=None,
                    help="site directory (default: the user site-packages)")
    a = ap.parse_args(argv)
    target = a.target or _default_target()
    if a.action == "install":
        return install(a.name, target)
    return uninstall(a.name, target)


if __name__ == "__main__":
    sys.exit(main())
