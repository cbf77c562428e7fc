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
#: Pages that show every line a command prints, on both streams: a command that writes to
#: stderr has a ``# stderr ...`` section after its ``# stdout`` lines.
_WHOLE_OUTPUT = frozenset({"docs/tutorial.md"})


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_runnable_block_of_the_page_runs_as_written(page: str, tmp_path: Path) -> None:
    steps = steps_of(PAGES[page])
    assert any(step.kind == "run" for step in steps), f"{page}: files but no command runs them"
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    run_steps(steps, tmp_path, whole_output=page in _WHOLE_OUTPUT)


def test_the_tutorial_shows_the_log_its_app_writes_on_stderr_labelled() -> None:
    shop = [s for s in steps_of(PAGES["docs/tutorial.md"]) if s.argument == "python shop.py"]
    [(_, _, body)] = shop
    stdout, stderr = expected_streams(body)
    assert stdout and any("charged order 1" in line for line in stdout)
    assert len(stderr) == 4 and all(" INFO trio_streams.app.shop: " in line for line in stderr)
    assert body.splitlines()[0] == "# stdout", body


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


def expected_streams(body: str) -> tuple[list[str], list[str]]:
    """A command block's expected lines, ``(stdout, stderr)``: the lines after a line
    ``# stderr ...`` are stderr's, the others (after ``# stdout``, or unlabelled) stdout's."""
    streams: tuple[list[str], list[str]] = ([], [])
    current = streams[0]
    for line in body.strip().splitlines():
        if line.startswith("# stdout"):
            current = streams[0]
        elif line.startswith("# stderr"):
            current = streams[1]
        else:
            current.append(line)
    return streams


def _pattern(expected: str) -> str:
    """``expected`` as a regular expression: "..." stands for text that varies (times)."""
    return ".*".join(re.escape(part) for part in expected.strip().split("..."))


def run_steps(steps: list[Step], tmp_path: Path, *, whole_output: bool = False) -> None:
    for kind, argument, body in steps:
        if kind == "file":
            (tmp_path / argument).write_text(body)
            continue
        argv = shlex.split(argument)
        if argv[0] == "python":
            argv[0] = sys.executable
        elif argv[0] == "trio-streams":
            argv[:1] = [sys.executable, "-m", "trio_streams"]
        result = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        output = result.stdout
        assert result.returncode == 0, f"{argument} failed:\n{output}\n{result.stderr}"
        shown, shown_stderr = expected_streams(body)
        if whole_output:  # stderr as shown, every line of it, in order
            printed = result.stderr.splitlines()
            assert len(printed) == len(shown_stderr), (
                f"{argument}: stderr is\n{result.stderr}\nthe page shows\n{shown_stderr}"
            )
            for line, expected in zip(printed, shown_stderr, strict=True):
                assert re.fullmatch(_pattern(expected), line), f"{argument}: {line!r}"
        elif argv[0] == sys.executable and argv[1:2] != ["-m"]:
            # A script prints what the page shows; on stderr, at most the app's INFO log lines.
            unshown = [line for line in result.stderr.splitlines() if not _INFO.match(line)]
            assert unshown == [], f"{argument}: printed what the page does not show: {unshown}"
        for expected in shown:
            if " passed" in expected:  # pytest's timing varies; compare the count only
                expected = expected.split(" in ")[0]
            pattern = _pattern(expected)
            assert re.search(pattern, output), f"{argument}: missing {expected!r} in\n{output}"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_pages_are_not_empty(page: str) -> None:
    assert (DOCS / page).read_text().strip()


def test_the_home_page_is_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    assert (DOCS / "index.md").read_text() == readme.replace("](docs/", "](")


@pytest.mark.parametrize(
    "page", sorted(str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *DOCS.rglob("*.md")])
)
def test_every_code_fence_of_the_page_is_closed(page: str) -> None:
    """An unclosed fence turns the rest of the page into code (and hides its blocks from the
    runner): each fence closes before the end of the page and before the next heading."""
    opened: int | None = None
    for number, line in enumerate((ROOT / page).read_text().splitlines(), 1):
        if line.startswith("```"):
            opened = None if opened is not None else number
        elif opened is not None and line.startswith("## "):
            pytest.fail(f"{page}:{opened}: a fence still open at the heading on line {number}")
    assert opened is None, f"{page}:{opened}: a fence never closed"
