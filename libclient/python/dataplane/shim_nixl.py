# SPDX-License-Identifier: MIT
"""Opt-in ``nixl`` import shim: ``python3 -m dataplane.shim_nixl install [DIR]``.

Writes a small package ``DIR/nixl`` (``_api``, ``_bindings``, ``_utils``,
``logging``) whose modules are dataplane.nixl and its companions, so that code written for NIXL
(``from nixl._api import nixl_agent, nixl_agent_config``) runs on dataplane
unchanged. DIR defaults to the user site directory; it must be on
``sys.path`` of the Python that imports nixl (a site directory, or
PYTHONPATH). It never shadows a real NIXL: when ``nixl`` can be imported from
anywhere else, install says where and exits 1, writing nothing. ``uninstall
[DIR]`` removes only a shim it wrote; ``status`` says what ``import nixl``
would load. docs/python.md, "NIXL layer".
"""

import importlib.machinery
import os
import shutil
import site
import sys

MARK = "dataplane-nixl-shim"

_FILES = {
    "__init__.py": '''# {mark}: written by `python3 -m dataplane.shim_nixl install`; remove with uninstall.
"""NIXL's Python API served by dataplane (dataplane.nixl)."""
from ._api import (DEFAULT_COMM_PORT, nixl_agent, nixl_agent_config, nixl_backend_handle,
                   nixl_prepped_dlist_handle, nixl_thread_sync_t, nixl_xfer_handle)

__all__ = ["DEFAULT_COMM_PORT", "nixl_agent", "nixl_agent_config", "nixl_backend_handle",
           "nixl_prepped_dlist_handle", "nixl_thread_sync_t", "nixl_xfer_handle"]
''',
    "_api.py": '''# {mark}
from dataplane.nixl import *  # noqa: F401,F403
from dataplane.nixl import (DEFAULT_COMM_PORT, NIXL_INIT_AGENT, nixl_agent,  # noqa: F401
                            nixl_agent_config, nixl_backend_handle, nixl_prepped_dlist_handle,
                            nixl_thread_sync_t, nixl_xfer_handle)
''',
    "_bindings.py": '''# {mark}
# NIXL's low-level binding is dataplane.nixl_bindings itself (one module: what
# a caller sets on nixl._bindings, nixl_agent sees).
import sys as _sys

import dataplane.nixl_bindings as _m

_sys.modules[__name__] = _m
''',
    "_utils.py": '''# {mark}
import sys as _sys

import dataplane.nixl_utils as _m

_sys.modules[__name__] = _m
''',
    "logging.py": '''# {mark}
import sys as _sys

import dataplane.nixl_logging as _m

_sys.modules[__name__] = _m
''',
}


def _is_shim(pkg_dir):
    try:
        with open(os.path.join(pkg_dir, "__init__.py")) as f:
            return MARK in f.readline()
    except OSError:
        return False


def _find(skip=None):
    """Where each importable ``nixl`` is on sys.path (without importing it),
    leaving out DIR skip."""
    found = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.getcwd())
        if skip and path == os.path.abspath(skip):
            continue
        spec = importlib.machinery.PathFinder.find_spec("nixl", [path])
        if spec is not None:
            loc = (list(spec.submodule_search_locations or []) or [spec.origin])[0]
            found.append(loc)
    return found


def install(target):
    pkg = os.path.join(target, "nixl")
    real = [p for p in _find(skip=target) if not _is_shim(p)]
    if real:
        print(f"a NIXL is importable already: {real[0]}; not installing the dataplane shim "
              "(it would shadow it or be shadowed)", file=sys.stderr)
        return 1
    if os.path.exists(pkg) and not _is_shim(pkg):
        print(f"{pkg} exists and is not the dataplane shim; not touching it", file=sys.stderr)
        return 1
    os.makedirs(pkg, exist_ok=True)
    for name, text in _FILES.items():
        tmp = os.path.join(pkg, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text.format(mark=MARK))
        os.replace(tmp, os.path.join(pkg, name))
    print(f"installed the dataplane nixl shim in {pkg}")
    if os.path.abspath(target) not in (os.path.abspath(p or ".") for p in sys.path):
        print(f"note: {target} is not on sys.path: add it to PYTHONPATH", file=sys.stderr)
    return 0


def uninstall(target):
    pkg = os.path.join(target, "nixl")
    if not os.path.exists(pkg):
        print(f"no shim in {target}")
        return 0
    if not _is_shim(pkg):
        print(f"{pkg} is not the dataplane shim; not removing it", file=sys.stderr)
        return 1
    shutil.rmtree(pkg)
    print(f"removed {pkg}")
    return 0


def status():
    found = _find()
    if not found:
        print("no nixl importable")
    for i, p in enumerate(found):
        print("%s %s (%s)" % ("loads" if i == 0 else "shadowed", p,
                              "dataplane shim" if _is_shim(p) else "NIXL"))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python3 -m dataplane.shim_nixl install|uninstall [DIR] | status"
    if not argv or argv[0] not in ("install", "uninstall", "status") or len(argv) > 2:
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "status":
        return status()
    target = argv[1] if len(argv) > 1 else site.getusersitepackages()
    return install(target) if argv[0] == "install" else uninstall(target)


if __name__ == "__main__":
    sys.exit(main())
