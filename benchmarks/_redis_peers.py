"""The outside peers of the Redis benchmarks, set up the way each runs fastest.

- **FastStream** 0.7 runs in an interpreter of its own (``--faststream-python PATH``), which
  must have ``faststream[redis]==0.7.0`` and ``hiredis``: FastStream talks to Redis through
  redis-py, which parses replies with hiredis when it is installed and in Python otherwise, so
  without it the peer would be measured slower than it is. :func:`checked_faststream_python`
  refuses such an interpreter before anything is measured (and each peer script checks again).
  Set one up with ``python -m venv PEERS && PEERS/bin/pip install 'faststream[redis]==0.7.0'
  hiredis``.
- **coredis** runs with ``COREDIS_OPTIMIZED=1``, its documented switch that drops its runtime
  argument validation: coredis reads it when its modules are imported (its validating
  decorators are applied then or not at all), so :func:`import_optimized_coredis` sets it
  before the first import and checks that it took.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from types import ModuleType

__all__ = [
    "FASTSTREAM_SETUP",
    "checked_faststream_python",
    "import_optimized_coredis",
    "require_hiredis",
]

#: How to make an interpreter the FastStream peers can run in.
FASTSTREAM_SETUP = (
    "python -m venv PEERS && PEERS/bin/pip install 'faststream[redis]==0.7.0' hiredis, "
    "then pass --faststream-python PEERS/bin/python"
)

#: Run by the chosen interpreter: FastStream's Redis support, and redis-py parsing with hiredis.
_PROBE = (
    "import faststream.redis, hiredis; from redis.utils import HIREDIS_AVAILABLE; "
    "from importlib.metadata import version; "
    "print(version('faststream'), version('hiredis'), HIREDIS_AVAILABLE)"
)


def checked_faststream_python(chosen: str | None) -> str | None:
    """``chosen`` if it can run the FastStream peers (faststream[redis] and hiredis, which
    redis-py then uses); None if none was chosen. Exits with what is missing otherwise."""
    if chosen is None:
        print(f"FastStream: not measured (to measure it: {FASTSTREAM_SETUP})")
        return None
    probe = subprocess.run([chosen, "-c", _PROBE], capture_output=True, text=True)
    words = probe.stdout.split()
    if probe.returncode != 0 or words[-1:] != ["True"]:
        raise SystemExit(
            f"--faststream-python {chosen}: the FastStream peer needs faststream[redis] 0.7.0 "
            f"and hiredis, which redis-py must use ({FASTSTREAM_SETUP}): "
            f"{(probe.stderr.strip().splitlines() or ['hiredis not in use'])[-1]}"
        )
    print(f"FastStream peer: faststream {words[0]}, hiredis {words[1]} ({chosen})")
    return chosen


def require_hiredis() -> None:
    """In a FastStream peer process: exit unless redis-py parses with hiredis."""
    from redis.utils import HIREDIS_AVAILABLE

    if not HIREDIS_AVAILABLE:
        raise SystemExit(
            f"{sys.executable}: redis-py finds no hiredis; the FastStream peer needs it "
            f"({FASTSTREAM_SETUP})"
        )


def import_optimized_coredis() -> ModuleType:
    """coredis, imported with ``COREDIS_OPTIMIZED=1`` (see the module docstring)."""
    if "coredis" in sys.modules:
        raise SystemExit("coredis was imported before COREDIS_OPTIMIZED=1 could be set")
    os.environ["COREDIS_OPTIMIZED"] = "1"
    coredis = importlib.import_module("coredis")  # typed alike whether coredis is installed
    if not coredis.Config.optimized:
        raise SystemExit("coredis ignores COREDIS_OPTIMIZED=1: its validation would stay on")
    return coredis
