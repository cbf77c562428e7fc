"""Lua scripts that say what they are for, so an error names a script by its purpose.

An ``EVAL`` command's first argument is the script's whole text: put in an error message or a
log line, it would fill the line with Lua. A :class:`Script` is that text (a ``str``, sent as
it is) with a short ``purpose``; :func:`~.errors.describe_command` shows the purpose of a
:class:`Script` and only the length of any other script, never its text.
"""

from __future__ import annotations

from typing import Self

__all__ = ["Script"]


class Script(str):
    """The text of a Lua script, with what it is for (``"copy to a stream, then acknowledge"``)."""

    purpose: str

    def __new__(cls, text: str, *, purpose: str) -> Self:
        script = super().__new__(cls, text)
        script.purpose = purpose
        return script
