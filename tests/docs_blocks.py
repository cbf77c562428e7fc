"""The runnable code blocks of the documentation, page by page.

A page's runnable blocks are its files and its commands:

- a fenced block with a title (```` ```python title="shop.py" ````) is a file, written out under
  that name;
- a ```` ```console ```` block whose first line, and only that line, starts with ``$ `` is a
  command; the lines after it are what its output must contain (``...`` stands for text that
  varies). A block of several ``$`` lines is a synopsis of commands, not a session to run.
  Lines after a line ``# stderr ...`` are what it prints on stderr (``# stdout`` labels the
  others); a page that shows whole output (the tutorial) shows every stderr line, in order.

Blocks without a title are fragments that illustrate a point and are not run. The docs tests
(``tests/test_docs.py``) run each page's steps in order in a fresh directory; ``nox -s lint``
type-checks each page's Python files with ``mypy --strict`` (``python -m tests.docs_blocks``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Literal, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"```(\w+)([^\n]*)\n(.*?)```", re.S)


class Step(NamedTuple):
    kind: Literal["file", "run"]
    #: The file's name, or the command line.
    argument: str
    #: The file's text, or the output the command must print.
    body: str


def steps_of(path: Path) -> list[Step]:
    """The files and commands of one page, in order."""
    steps = []
    for language, info, body in _BLOCK.findall(path.read_text()):
        title = re.search(r'title="([^"]+)"', info)
        if title:
            steps.append(Step("file", title.group(1), body))
        elif language == "console" and body.startswith("$ ") and body.count("\n$ ") == 0:
            command, _, expected = body.partition("\n")
            steps.append(Step("run", command[2:], expected))
    return steps


def pages() -> dict[str, Path]:
    """Every page with runnable blocks, by its name relative to the checkout. The home page
    (docs/index.md) is the README, which is listed once, as README.md."""
    found = {"README.md": ROOT / "README.md"}
    for path in sorted(DOCS.rglob("*.md")):
        if path.name != "index.md" or path.parent != DOCS:
            found[str(path.relative_to(ROOT))] = path
    return {name: path for name, path in found.items() if steps_of(path)}


def write_python_files(out: Path) -> list[Path]:
    """Write each page's Python files into a folder of its own under ``out``; the folders."""
    folders = []
    for name, path in pages().items():
        files = [s for s in steps_of(path) if s.kind == "file" and s.argument.endswith(".py")]
        if not files:
            continue
        folder = out / re.sub(r"[^A-Za-z0-9]+", "_", name)
        folder.mkdir(parents=True, exist_ok=True)
        for step in files:
            (folder / step.argument).write_text(step.body)
        folders.append(folder)
    return folders


def type_check() -> int:
    """``mypy --strict`` over each page's Python files (one run per page: pages may reuse a
    module name); the number of pages that failed."""
    import subprocess
    import tempfile

    failed = 0
    with tempfile.TemporaryDirectory() as out:
        for folder in write_python_files(Path(out)):
            command = [
                sys.executable,
                "-m",
                "mypy",
                "--strict",
                "--cache-dir",
                str(ROOT / ".mypy_cache"),
            ]
            result = subprocess.run([*command, "."], cwd=folder, check=False)
            if result.returncode:
                print(f"docs examples of {folder.name} do not type-check", file=sys.stderr)
                failed += 1
    return failed


if __name__ == "__main__":
    sys.exit(1 if type_check() else 0)
