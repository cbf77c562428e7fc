"""Every command's ``--help`` is plain text: a terminal shows reST markup verbatim."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from trio_streams.cli.commands import build_parser


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def test_every_commands_help_is_plain_text_without_rest_markup() -> None:
    seen = []
    for parser in parsers(build_parser()):
        text = parser.format_help()
        seen.append(parser.prog)
        assert "``" not in text, (parser.prog, text)
        assert ":class:`" not in text and ":func:`" not in text, (parser.prog, text)
    assert "trio-streams group set-position" in seen


def test_group_set_position_help_names_its_positions_plainly() -> None:
    [move] = [p for p in parsers(build_parser()) if p.prog == "trio-streams group set-position"]
    text = " ".join(move.format_help().split())
    assert "(XGROUP SETID, with ENTRIESREAD where the server takes it" in text
    assert "beginning (the whole stream is delivered again), end (the last id now)" in text
