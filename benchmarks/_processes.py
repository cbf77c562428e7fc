"""Timing whole processes: a command's wall time and the CPU time it used, and the modules
``python -X importtime`` says it imported.

CPU time (user + system, of the child alone) is reported beside the wall time because on a
shared machine the wall time also counts the time the process waited for a core; both are
medians of interleaved rounds, and each is compared with a peer timed in the same rounds.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where the measured commands run: not a checkout, whose trio_streams ``python -m`` would
#: import before the one ``PYTHONPATH`` names.
NEUTRAL = "/"


@dataclass
class Timings:
    """The wall and CPU seconds of each run of one command."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def python_env(tree: Path | None = None) -> dict[str, str]:
    """The environment a measured interpreter runs in: trio-streams imported from ``tree`` (this
    checkout by default), bytecode written and used as an installed package's is, output
    buffered as it is into a pipe or a file."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
    }
    env["PYTHONPATH"] = str(tree or ROOT)
    return env


def timed(
    argv: Sequence[str], env: Mapping[str, str], timings: Timings, *, stdout: int | None = None
) -> None:
    """Run ``argv`` to its end, output to /dev/null (or ``stdout``); add its times to
    ``timings``. A failed run raises: a benchmark of an error is no figure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        argv,
        cwd=NEUTRAL,
        env=dict(env),
        stdout=subprocess.DEVNULL if stdout is None else stdout,
        stderr=subprocess.PIPE,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr!r}")
    timings.wall.append(wall)
    timings.cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def import_times(argv: Sequence[str], env: Mapping[str, str]) -> list[tuple[int, int, str]]:
    """``(self µs, cumulative µs, module)`` of each module ``argv`` (a ``python`` command line)
    imports, from ``-X importtime``'s report of one run."""
    command = [argv[0], "-X", "importtime", *argv[1:]]
    result = subprocess.run(
        command,
        cwd=NEUTRAL,
        env=dict(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    rows = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((int(own), int(cumulative), name.strip()))
    return rows
