# SPDX-License-Identifier: MIT
"""NIXL's Python logging (``nixl.logging``): ``get_logger(name)`` gives
``nixl.<name>`` (leading underscores dropped), under one ``nixl`` logger
that writes to stdout at INFO, or at NIXL_LOG_LEVEL (TRACE, DEBUG, INFO,
WARN, ERROR, FATAL) when set; configured once, at the first call.
NIXL_DEBUG_LOGGING=yes makes logging's own errors raise. Its core's lines
(stderr) are dataplane.nixl.native_log."""

import logging
import os
import sys

_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_configured = False


def setup_logging():
    global _configured
    if _configured:
        return
    log = logging.getLogger("nixl")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s",
        "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)
    env = os.environ.get("NIXL_LOG_LEVEL")
    if env:
        level = _LEVELS.get(env.upper())
        if level is None:
            log.warning("Invalid NIXL_LOG_LEVEL value '%s'. Using configuration default.", env)
        else:
            log.setLevel(level)
            log.info("Log level set to %s from NIXL_LOG_LEVEL environment variable",
                     env.upper())
    logging.raiseExceptions = os.environ.get("NIXL_DEBUG_LOGGING", "").lower() in (
        "true", "1", "yes")
    _configured = True


def get_logger(name):
    setup_logging()
    return logging.getLogger("nixl." + name.lstrip("_"))
