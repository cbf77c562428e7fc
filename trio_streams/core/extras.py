"""Optional dependencies: which extra brings each one, and the error when it is missing.

A plain ``pip install`` of trio-streams runs stream-file and in-process apps and the whole
command line. Everything else is an extra (``pyproject.toml``): ``redis`` (hiredis, the RESP
parser), ``http`` (hypercorn), ``prometheus``, ``otel``, ``reload`` (watchfiles), ``tui`` (rich)
and ``pydantic``. Every place that imports one of them goes through this module, so a missing
one is always the same typed error, :class:`MissingExtra`, raised before an app starts and
naming the extra and the command that installs it into this interpreter from where
trio-streams was installed: ``'/path/to/venv/bin/python' -m pip install -e
'/path/to/checkout[redis]'`` for a source tree (editable or not, as it was installed),
``'/path/to/venv/bin/python' -m pip install 'trio-streams[redis]'`` otherwise. The line names
``sys.executable`` because a bare ``pip`` on the ``PATH`` may belong to another Python (a
virtual environment that is not activated).

Cheap to call: a check looks the modules up without importing them, and only building the
error reads the package's own install metadata. Nothing here is async or cancellable.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shlex
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import final
from urllib.parse import unquote, urlparse

__all__ = [
    "EXTRAS",
    "Extra",
    "MissingExtra",
    "available",
    "importing",
    "install_command",
    "optional",
    "require",
]

_DISTRIBUTION = "trio-streams"


@final
@dataclass(frozen=True, slots=True)
class Extra:
    """One extra of ``pyproject.toml``: the distributions it installs, the modules they bring."""

    name: str
    distributions: tuple[str, ...]
    modules: tuple[str, ...]


#: Every optional dependency, by the extra that installs it.
EXTRAS: dict[str, Extra] = {
    extra.name: extra
    for extra in (
        Extra("redis", ("hiredis",), ("hiredis",)),
        Extra("http", ("hypercorn",), ("hypercorn",)),
        Extra("prometheus", ("prometheus-client",), ("prometheus_client",)),
        Extra("otel", ("opentelemetry-api",), ("opentelemetry",)),
        Extra("reload", ("watchfiles",), ("watchfiles",)),
        Extra("tui", ("rich",), ("rich",)),
        Extra("pydantic", ("pydantic",), ("pydantic",)),
    )
}


class MissingExtra(ImportError):
    """A feature was asked for whose optional dependency is not installed.

    ``extra`` names the extra, ``command`` the ``pip install`` line that adds it to this
    installation; the message says both in one line. An :class:`ImportError`, so code that
    already treats a failed import as "not available" keeps doing so.
    """

    def __init__(self, extra: str, feature: str) -> None:
        known = EXTRAS[extra]
        self.extra = extra
        self.feature = feature
        self.command = install_command(extra)
        super().__init__(
            f"{feature} needs the '{extra}' extra ({', '.join(known.distributions)}, not "
            f"installed): {self.command}",
            name=known.modules[0],
        )


def available(extra: str) -> bool:
    """Whether every module of ``extra`` can be imported (found, not imported: cheap)."""
    return all(importlib.util.find_spec(module) is not None for module in EXTRAS[extra].modules)


def require(extra: str, feature: str) -> None:
    """Refuse ``feature`` with :class:`MissingExtra` unless ``extra`` is installed.

    For checks before an app starts (``--http``, ``--reload``), where the import itself comes
    later, inside a task."""
    if not available(extra):
        raise MissingExtra(extra, feature)


def optional(extra: str) -> ModuleType | None:
    """The first module of ``extra`` imported, or None when the extra is not installed: for a
    module that imports without it and refuses at first use (see ``redis.client.protocol``)."""
    if not available(extra):
        return None
    return importlib.import_module(EXTRAS[extra].modules[0])


@contextmanager
def importing(extra: str, feature: str) -> Iterator[None]:
    """Wrap the import statements of an optional dependency::

        with importing("prometheus", "trio_streams.prometheus"):
            from prometheus_client import Counter

    A top-level module of ``extra`` that is not found becomes :class:`MissingExtra` (chained
    to the original error); any other import error passes unchanged (a submodule missing from
    an installed dependency is a broken or too old installation, not a missing extra, and its
    own message says more)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name not in EXTRAS[extra].modules:
            raise
        raise MissingExtra(extra, feature) from exc


def install_command(extra: str) -> str:
    """The ``pip install`` line that adds ``extra`` to this installation of trio-streams.

    From a source tree (the package imported from a checkout, or installed from a local
    directory, as ``direct_url.json`` records) the line names that directory, with ``-e`` when
    it is an editable install; trio-streams from an index gets ``'trio-streams[extra]'``. The
    line runs pip through this interpreter (``sys.executable``, quoted for the shell), so it
    installs where trio-streams runs even from a virtual environment that is not activated."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    source = _source_tree()
    if source is None:
        return f"{pip} {shlex.quote(f'{_DISTRIBUTION}[{extra}]')}"
    path, editable = source
    flag = "-e " if editable else ""
    return f"{pip} {flag}{shlex.quote(f'{path}[{extra}]')}"


def _source_tree() -> tuple[Path, bool] | None:
    """Where trio-streams was installed from, and whether editably; None for an index."""
    checkout = Path(__file__).resolve().parents[2]  # trio_streams/core/extras.py -> the tree
    if _is_project(checkout):
        return checkout, True  # imported from the tree itself: an editable install or a path
    try:
        raw = metadata.distribution(_DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not raw:
        return None
    try:
        origin = json.loads(raw)
    except ValueError:
        return None
    url = urlparse(str(origin.get("url", "")))
    directory = origin.get("dir_info")
    if url.scheme != "file" or not isinstance(directory, dict):
        return None  # a wheel or an archive: no tree to point at
    path = Path(unquote(url.path))
    if not _is_project(path):
        return None  # the tree was moved or removed since
    return path, bool(directory.get("editable", False))


def _is_project(directory: Path) -> bool:
    """Whether ``directory`` holds trio-streams's own ``pyproject.toml``."""
    try:
        with (directory / "pyproject.toml").open("rb") as file:
            project = tomllib.load(file).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == _DISTRIBUTION
