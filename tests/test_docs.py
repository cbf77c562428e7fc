"""The tutorial runs as written: its files are written out and its commands run and compared."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"```(\w+)([^\n]*)\n(.*?)```", re.S)


def tutorial_steps(path: Path) -> list[tuple[str, str, str]]:
    """(kind, argument, body) for each file (kind 'file') and command (kind 'run')."""
    steps = []
    for language, info, body in BLOCK.findall(path.read_text()):
        title = re.search(r'title="([^"]+)"', info)
        if title:
            steps.append(("file", title.group(1), body))
        elif language == "console" and body.startswith("$ "):
            command, _, expected = body.partition("\n")
            steps.append(("run", command[2:], expected))
    return steps


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    steps = tutorial_steps(DOCS / "tutorial.md")
    assert any(kind == "run" for kind, _, _ in steps)
    run_steps(steps, tmp_path)


def test_the_readme_example_runs_and_its_test_passes(tmp_path: Path) -> None:
    steps = tutorial_steps(DOCS.parent / "README.md")
    assert [argument for kind, argument, _ in steps if kind == "file"] == [
        "billing.py",
        "test_billing.py",
    ]
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    run_steps([*steps, ("run", "python -m pytest -q test_billing.py", "1 passed")], tmp_path)


def run_steps(steps: list[tuple[str, str, str]], tmp_path: Path) -> None:
    for kind, argument, body in steps:
        if kind == "file":
            (tmp_path / argument).write_text(body)
            continue
        argv = shlex.split(argument)
        if argv[0] == "python":
            argv[0] = sys.executable
        elif argv[0] == "trio-streams":
            argv[:1] = [sys.executable, "-m", "trio_streams.cli"]
        result = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        output = result.stdout
        assert result.returncode == 0, f"{argument} failed:\n{output}\n{result.stderr}"
        for expected in body.strip().splitlines():
            if " passed" in expected:  # pytest's timing varies; compare the count only
                expected = expected.split(" in ")[0]
            # "..." in an expected line stands for text that varies (times, offsets).
            pattern = ".*".join(re.escape(part) for part in expected.strip().split("..."))
            assert re.search(pattern, output), f"{argument}: missing {expected!r} in\n{output}"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_pages_are_not_empty(page: str) -> None:
    assert (DOCS / page).read_text().strip()


def test_the_home_page_is_the_readme() -> None:
    readme = (DOCS.parent / "README.md").read_text()
    assert (DOCS / "index.md").read_text() == readme.replace("](docs/", "](")
