"""The docs run as written: every page's files are written out and its commands run and compared
(see ``tests/docs_blocks.py`` for what counts as a runnable block)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_blocks import DOCS, ROOT, Step, pages, steps_of

PAGES = pages()
#: A log line below WARNING, as the app's default logging writes it to stderr.
_INFO = re.compile(r"\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO) ")


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_runnable_block_of_the_page_runs_as_written(page: str, tmp_path: Path) -> None:
    steps = steps_of(PAGES[page])
    assert any(step.kind == "run" for step in steps), f"{page}: files but no command runs them"
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    run_steps(steps, tmp_path)


def test_the_pages_that_teach_have_runnable_examples() -> None:
    for page in (
        "README.md",
        "docs/tutorial.md",
        "docs/guides/testing.md",
        "docs/guides/outcomes.md",
    ):
        assert page in PAGES, f"{page} has no runnable example"
    readme = [s.argument for s in steps_of(ROOT / "README.md") if s.kind == "file"]
    assert readme == ["billing.py", "test_billing.py", "pytest.ini"]


def run_steps(steps: list[Step], tmp_path: Path) -> None:
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
        if argv[0] == sys.executable and argv[1:2] != ["-m"]:
            # A script prints what the page shows; on stderr, at most the app's INFO log lines.
            unshown = [line for line in result.stderr.splitlines() if not _INFO.match(line)]
            assert unshown == [], f"{argument}: printed what the page does not show: {unshown}"
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
    readme = (ROOT / "README.md").read_text()
    assert (DOCS / "index.md").read_text() == readme.replace("](docs/", "](")
