"""Running a command as a user would, in a directory of its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: Variables of this test run that a user's shell would not have.
_OURS = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_")


def run_in(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run in ``directory`` (within a minute) without this run's Python settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    return subprocess.run(
        argv, cwd=directory, env=env, capture_output=True, text=True, timeout=60, check=False
    )
