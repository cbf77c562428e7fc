"""The README's example test passes when a user copies it into an empty directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.docs_blocks import ROOT, steps_of

from .support import run_in

README = ROOT / "README.md"


@pytest.mark.slow
def test_the_readme_test_passes_in_a_fresh_directory_with_the_files_the_readme_shows(
    tmp_path: Path,
) -> None:
    files = {step.argument: step.body for step in steps_of(README) if step.kind == "file"}
    assert {"billing.py", "test_billing.py"} <= set(files)
    for name, body in files.items():  # every file the README tells the reader to create
        (tmp_path / name).write_text(body)
    result = run_in(tmp_path, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("1 passed"), result.stdout


def test_the_readme_says_what_a_test_needs_installed() -> None:
    readme = README.read_text()
    assert "pytest-trio" in readme
    assert "trio_mode = true" in readme
