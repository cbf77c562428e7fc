"""What the docs name exists: every ``trio-streams`` command line they show uses subcommands and
flags the CLI has, and every ``trio_streams.x.Y`` they name imports. A renamed flag or a moved
class breaks a page's readers without breaking its runnable blocks; these catch it."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

from tests.docs_blocks import DOCS, ROOT
from trio_streams._moved import MOVED
from trio_streams.cli.commands import build_parser

#: Every page a reader reads: the README and the docs (docs/index.md is the README).
PAGES = [ROOT / "README.md", *(p for p in sorted(DOCS.rglob("*.md")) if p != DOCS / "index.md")]

_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
_SPAN = re.compile(r"`([^`\n]+)`")
_IMPORT = re.compile(r"^[ \t]*from (trio_streams[\w.]*) import (\([^)]*\)|[^\n]*)", re.M)
_DOTTED = re.compile(r"\btrio_streams(?:\.[A-Za-z_]\w*)+")
#: A command line, not its output: ``trio-streams run: app 'x' did not start`` is output.
_COMMAND = re.compile(r"trio-streams [^\s:]+(\s|$)")
#: Output of a subcommand: ``trio-streams file decode: error: ...``.
_OUTPUT = re.compile(r"trio-streams( [a-z-]+)+:(\s|$)")
#: Logger names (an app's, a subscription's): what follows the prefix is the user's name.
LOGGER_PREFIXES = ("trio_streams.app.", "trio_streams.subscription.")
#: The pages that say where the modules of the flat layout went, naming their old paths.
PAGES_ON_THE_OLD_PATHS = frozenset({"docs/architecture.md", "docs/reference.md"})
#: Names that are not modules: the loggers of the supervisor and of the HTTP endpoints, and the
#: span attributes of a delivery's outcome, of a request's outcome and of a reply's kind.
NOT_MODULES = frozenset(
    {
        "trio_streams.supervisor",
        "trio_streams.http_endpoints",
        "trio_streams.outcome",
        "trio_streams.request.outcome",
        "trio_streams.reply",
    }
)


def command_lines(text: str) -> list[str]:
    """The ``trio-streams ...`` command lines of a page: lines of its code blocks (a ``$``
    prompt dropped, backslash continuations joined) and inline code spans that start with
    the command."""
    found = []
    for block in _FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(line.split()).removeprefix("$ ")
            if _COMMAND.match(line) and not _OUTPUT.match(line):
                found.append(line)
    prose = _FENCE.sub("", text)
    found.extend(span for span in _SPAN.findall(prose) if _COMMAND.match(span))
    return found


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def unknown_words(line: str, parser: argparse.ArgumentParser) -> list[str]:
    """The subcommands and flags (``--flag``, ``-f``) of ``line`` that the CLI does not have."""
    try:
        words = shlex.split(line, comments=True)[1:]
    except ValueError:  # an unclosed quote in a synopsis: words are enough
        words = line.split()[1:]
    wrong = []
    for word in words:
        if word in ("|", ">", "&&", ";", "&"):
            break  # the rest is another command
        subcommands = _subcommands(parser)
        if subcommands and not word.startswith("-"):
            if word in subcommands:
                parser = subcommands[word]
            elif re.fullmatch(r"[a-z][a-z-]*", word):
                wrong.append(word)
                break
            continue
        if re.match(r"--?[A-Za-z]", word):
            flag = word.split("=", 1)[0] if word.startswith("--") else word[:2]
            if flag not in parser._option_string_actions:
                wrong.append(flag)
    return wrong


def dotted_names(text: str) -> set[str]:
    """The ``trio_streams.x.Y`` names of a page, logger names left out, and every name its
    code imports (``from trio_streams.x import Y, Z`` gives ``trio_streams.x.Y`` and ``.Z``)."""
    names = {
        name
        for name in _DOTTED.findall(text)
        if not (
            (name.startswith(LOGGER_PREFIXES) or f"{name}." in LOGGER_PREFIXES)
            and not resolves(name)
        )
        and name not in NOT_MODULES
    }
    for module, imported in _IMPORT.findall(text):
        for part in re.sub(r"#[^\n]*", "", imported.strip("()")).split(","):
            if name := part.split(" as ")[0].strip():
                names.add(f"{module}.{name}")
    return names


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute reached from the longest module in it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        if any(".".join(parts[:end]) in MOVED for end in range(2, cut + 1)):
            continue  # an old path still imports, with a warning: the docs name the new one
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_command_line_in_the_docs_uses_subcommands_and_flags_the_cli_has(
    page: Path,
) -> None:
    parser = build_parser()
    wrong = {
        line: words
        for line in command_lines(page.read_text())
        if (words := unknown_words(line, parser))
    }
    assert not wrong, f"{_name(page)}: the CLI has no {wrong}"


#: The guides of the command line: every ``--flag`` they name, in prose or tables too.
CLI_GUIDES = [DOCS / "guides" / "cli.md", DOCS / "guides" / "record-and-top.md"]


def every_flag(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of ``parser`` and of all its subcommands."""
    flags = set(parser._option_string_actions)
    for sub in _subcommands(parser).values():
        flags |= every_flag(sub)
    return flags


@pytest.mark.parametrize("page", CLI_GUIDES, ids=_name)
def test_every_flag_a_command_line_guide_names_is_a_flag_of_some_command(page: Path) -> None:
    flags = every_flag(build_parser())
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", page.read_text()))
    assert not named - flags, f"{_name(page)}: no command has {sorted(named - flags)}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_trio_streams_name_in_the_docs_imports(page: Path) -> None:
    named = dotted_names(page.read_text())
    if _name(page) in PAGES_ON_THE_OLD_PATHS:
        named = {n for n in named if not any(n == old or n.startswith(f"{old}.") for old in MOVED)}
    missing = sorted(n for n in named if not resolves(n))
    assert not missing, f"{_name(page)} names what does not import: {missing}"


def test_the_checks_see_a_wrong_flag_a_wrong_subcommand_and_a_wrong_name() -> None:
    parser = build_parser()
    assert unknown_words("trio-streams run svc:app --workers 2 --shutdown-timeout 5", parser) == []
    assert unknown_words("trio-streams run svc:app --worker 2", parser) == ["--worker"]
    assert {"--workers", "--stuck-after", "--no-header"} <= every_flag(parser)
    assert "--worker" not in every_flag(parser)
    assert unknown_words("trio-streams publish x.ss k -X a=b -H a=b", parser) == ["-X"]
    assert unknown_words("trio-streams file dcode x.ss", parser) == ["dcode"]
    assert unknown_words("trio-streams file decode x.ss | head --lines 3", parser) == []
    page = (
        "Run `trio-streams top redis://h --every 2`:\n```console\n$ trio-streams \\\nrun a:b\n```"
    )
    assert command_lines(page) == ["trio-streams run a:b", "trio-streams top redis://h --every 2"]
    assert command_lines("```\ntrio-streams run: app 'x' did not start\n```") == []
    assert command_lines("```\ntrio-streams file decode: error: argument --from\n```") == []
    assert resolves("trio_streams.file.FileBroker")
    assert not resolves("trio_streams.file.FileBrokr")
    assert not resolves("trio_streams.nowhere.Thing")
    imports = (
        "from trio_streams import (\n    App,  # the app\n    Router as R,\n)\n"
        "from trio_streams.file import FileBroker\n"
    )
    assert dotted_names(imports) == {
        "trio_streams.App",
        "trio_streams.Router",
        "trio_streams.file",
        "trio_streams.file.FileBroker",
    }
