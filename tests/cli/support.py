"""Running ``trio-streams`` in a real subprocess, and stream files to run it on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trio_streams.file.writer import StreamWriter

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "trio_streams.cli"]


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``trio-streams ARGS`` from the repository's root; its status and its output."""
    return run_command([*COMMAND, *args], env=env, stdin=stdin)


def run_command(
    argv: list[str], *, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from the repository's root (within a minute); its status and its output."""
    return subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def stream_file(path: Path, messages: int, *, key: str = "orders", payload: bytes = b"1") -> Path:
    """A stream file holding ``messages`` messages of ``key`` (seq 1..n)."""
    writer = StreamWriter(path, created_at_ms=1_700_000_000_000)
    try:
        for n in range(messages):
            writer.append(key, payload, 1_700_000_000_000 + n)
    finally:
        writer.close()
    return path


def stderr_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]
