"""How a standalone run logs: a level and a format, or a ``logging.config.dictConfig`` file.

``trio-streams run`` (and ``app.run()``, when nothing has configured logging yet) log to stderr
at INFO, one line per record: ``2024-05-01 12:00:00,000 INFO trio_streams.app.billing: ...``.
``--log-format json`` writes one JSON object per record instead (:class:`JsonFormatter`), and
``--log-config FILE`` hands a JSON ``dictConfig`` file to the standard library, which then
decides everything (a config's formatter can be ``{"()": "trio_streams.core.logs.JsonFormatter"}``).

Under ``--workers N`` (and ``--reload``) every process writes to the supervisor's stderr, so
each line says which process wrote it: ``[worker 1]`` (from ``TRIO_STREAMS_WORKER``) or
``[supervisor]`` after the level, and a ``"process"`` field in JSON. A run in one process has
no such tag.

What trio-streams itself logs, by level: INFO, the startup banner and lifecycle lines; WARNING,
one line per handler failure that will be retried, per dead letter and per drop after the last
attempt, and faults; ERROR, the last failed attempt of a message (with its traceback), and what
stopped the app. Tracebacks of retried failures and of what stopped the app are at DEBUG.
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
from datetime import UTC, datetime
from typing import Any, Final

from .errors import ConfigurationError

__all__ = [
    "FORMATS",
    "LEVELS",
    "TEXT_FORMAT",
    "JsonFormatter",
    "LogConfigError",
    "configure",
    "configure_default",
    "text_format",
]

#: The levels ``--log-level`` takes.
LEVELS: Final = ("debug", "info", "warning", "error", "critical")
#: The formats ``--log-format`` takes.
FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogConfigError(ConfigurationError):
    """A ``--log-config`` file that cannot be read or that ``dictConfig`` refuses."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: ``time`` (ISO 8601, UTC, milliseconds),
    ``level``, ``logger``, ``message``, ``process`` when one is given (``"worker 1"``,
    ``"supervisor"``), and ``exc_info`` (the formatted traceback) and ``stack_info`` when the
    record has them."""

    def __init__(self, process: str | None = None) -> None:
        super().__init__()
        self._process = process

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._process is not None:
            entry["process"] = self._process
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def configure(
    level: str = "info",
    fmt: str = "text",
    config_file: str | None = None,
    *,
    process: str | None = None,
) -> None:
    """Set up the root logger for a standalone run, replacing any handlers it has.

    ``process`` names the process in every line (``"worker 1"``, ``"supervisor"``: several
    processes share one stderr). With ``config_file`` (a JSON ``dictConfig`` document) the file
    decides, and ``level``, ``fmt`` and ``process`` are not used. Raises
    :class:`LogConfigError` naming the file and what is wrong.
    """
    if config_file is not None:
        _apply_config_file(config_file)
        return
    if level not in LEVELS:
        raise LogConfigError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    if fmt not in FORMATS:
        raise LogConfigError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter(process) if fmt == "json" else logging.Formatter(text_format(process))
    )
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def text_format(process: str | None = None) -> str:
    """The text format, with ``[process]`` after the level when a process is named."""
    if process is None:
        return TEXT_FORMAT
    tag = process.replace("%", "%%")
    return f"%(asctime)s %(levelname)s [{tag}] %(name)s: %(message)s"


def configure_default() -> None:
    """INFO to stderr in the text format, unless logging is configured already (the root
    logger has a handler): what ``app.run()`` does before it starts."""
    if not logging.getLogger().handlers:
        configure()


def _apply_config_file(path: str) -> None:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise LogConfigError(f"cannot read the log config {path}: {exc.strerror}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        kind = (
            " (YAML is not supported: write it as JSON)" if path.endswith((".yaml", ".yml")) else ""
        )
        raise LogConfigError(
            f"the log config {path} is not JSON{kind}: line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}"
        ) from None
    if not isinstance(config, dict):
        raise LogConfigError(f"the log config {path} must be a JSON object (a dictConfig dict)")
    config.setdefault("version", 1)
    try:
        logging.config.dictConfig(config)
    except (ValueError, TypeError, AttributeError, ImportError) as exc:
        raise LogConfigError(f"the log config {path} is refused by dictConfig: {exc}") from None
