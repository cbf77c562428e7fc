"""``trio-streams run module:app``: import an app and run it until a signal stops it."""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import logging
import os
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

from ..core import signal_guard
from ..core.app import App, AppFailed
from ..core.errors import ConfigurationError, TrioStreamsError
from ..core.extras import MissingExtra, require
from ..core.loading import importing, unregistered_brokers
from ..core.logs import LogConfigError, configure
from ..core.reporting import describe, report
from ..running.http_endpoints import EndpointError
from ..running.supervisor import (
    WORKER_ENV,
    SupervisorPolicy,
    check_workers,
    supervise,
    watch_supervisor,
    worker_command,
)
from ..running.supervisor_http import serve_worker_endpoints

__all__ = ["AppImportFailed", "AppNotFound", "load_app", "run_app"]

#: What the command's own lines start with; a worker of ``--workers`` adds its index, since the
#: workers and their supervisor share one stderr.
_PROG = "trio-streams run" + (
    f" [worker {os.environ[WORKER_ENV]}]" if WORKER_ENV in os.environ else ""
)
_TRACEBACK_HINT = "--log-level debug shows the traceback"
#: The exit status of a run that a signal stopped before it was running, or whose drain a
#: second signal cut short (128 + SIGINT, whichever signal it was).
_EXIT_CUT_SHORT = 128 + signal.SIGINT
_log = logging.getLogger("trio_streams.cli")


class AppNotFound(Exception):
    """The ``module:attribute`` given on the command line does not name an App."""


class AppImportFailed(Exception):
    """The app's module raised while it was imported (or its ``--factory`` raised): the target
    is right, the code it runs is not. A runtime error (exit 1), not a usage one; its
    ``__cause__`` is what the module raised."""


def load_app(target: str, *, factory: bool = False) -> App:
    """Import ``module:attribute`` (the current directory is importable) and return the App.

    With ``factory``, the attribute is called (with no argument) and must return the App.
    Raises :class:`AppNotFound` when the target is wrong (no such module or attribute, not an
    App), and :class:`AppImportFailed` when the module, or the factory, raised: the error it
    raised is the ``__cause__``.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise AppNotFound(f"expected MODULE:ATTRIBUTE (e.g. myservice.main:app), got {target!r}")
    _check_module_name(module_name, attribute)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = _import_target(module_name)
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AppNotFound(f"{module_name!r} has no attribute {attribute!r}") from None
    app = _call_factory(value, target) if factory else _app_named(value, target)
    if problem := unregistered_brokers(module):
        raise AppNotFound(problem)
    try:
        app.check_installed()
    except MissingExtra as exc:  # a broker's extra: usage, refused before the app starts
        raise AppNotFound(f"{target}: {exc}") from exc
    return app


def _import_target(module_name: str) -> ModuleType:
    """Import the target's module: a wrong name or a refusal as declared is usage
    (:class:`AppNotFound`), anything the module's own code raised is :class:`AppImportFailed`."""
    try:
        with importing(module_name):
            return importlib.import_module(module_name)
    except MissingExtra as exc:  # a feature's extra: usage, as for every command
        raise AppNotFound(f"cannot import {module_name!r}: {exc}") from exc
    except ConfigurationError as exc:  # refused as declared (at mount, app.run()): usage
        raise AppNotFound(f"module {module_name!r}: {exc}") from exc
    except ModuleNotFoundError as exc:
        if not _names_target(exc, module_name):  # the module imports one that is missing
            raise AppImportFailed(f"importing {module_name!r} failed: {describe(exc)}") from exc
        raise AppNotFound(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:
        raise AppImportFailed(f"importing {module_name!r} failed: {describe(exc)}") from exc


def _call_factory(value: Any, target: str) -> App:
    """``--factory``: call ``value`` with no argument; it must return the App."""
    if not callable(value):
        raise AppNotFound(
            f"--factory: {target} is {value!r}, not callable; "
            "--factory needs a function that returns the App (leave it out if "
            f"{target} is the App itself)"
        )
    try:
        made = value()
    except MissingExtra as exc:  # as from the import: a feature's extra is usage
        raise AppNotFound(f"--factory: calling {target}() failed: {exc}") from exc
    except Exception as exc:
        raise AppImportFailed(f"--factory: calling {target}() failed: {describe(exc)}") from exc
    if inspect.iscoroutine(made):
        made.close()
        raise AppNotFound(
            f"--factory: {target} is an async function; the factory must be a plain one"
        )
    if not isinstance(made, App):
        raise AppNotFound(
            f"--factory: {target}() returned {type(made).__name__}, not a trio_streams.App"
        )
    return made


def _app_named(value: Any, target: str) -> App:
    """The attribute the target names, which must be the App itself."""
    if isinstance(value, type):  # a class is no factory: calling it makes one of its own
        raise AppNotFound(
            f"{target} is the class {value.__name__}, not a trio_streams.App: "
            "name the App instance (module:app)"
        )
    if not isinstance(value, App):
        hint = " (is it a factory? add --factory)" if callable(value) else ""
        raise AppNotFound(f"{target} is {type(value).__name__}, not a trio_streams.App{hint}")
    return value


def _check_module_name(module_name: str, attribute: str) -> None:
    """Refuse a file path where a module name belongs (``../svc.py``, ``svc.py``), saying what
    to write instead: Python imports modules by name, from the current directory or
    ``PYTHONPATH``."""
    path = Path(module_name)
    is_path = "/" in module_name or os.sep in module_name
    if not is_path and module_name.startswith("."):
        raise AppNotFound(
            f"{module_name!r} is a relative module name: give the module's full name "
            f"(package.module:{attribute})"
        )
    if not is_path and path.suffix != ".py":
        return
    name = path.stem if path.suffix == ".py" else path.name
    if not is_path:
        raise AppNotFound(
            f"{module_name!r} is a file name, not a module: drop the .py and give "
            f"{name}:{attribute}"
        )
    where = str(path.parent)
    below_here = not path.is_absolute() and ".." not in path.parts
    # svc/main.py, with svc a package here, is also svc.main (the parts of a path below here)
    dotted = ".".join((*path.parent.parts, name))
    package = f"{dotted}:{attribute} if {where} is a package here, or " if below_here else ""
    raise AppNotFound(
        f"{module_name!r} is a file path, not a module: give MODULE:ATTRIBUTE ({package}"
        f"{name}:{attribute} run from the directory holding it (cd {where}) or with {where} on "
        "PYTHONPATH)"
    )


def _names_target(error: ModuleNotFoundError, module_name: str) -> bool:
    """Whether the missing module is the target itself or a package on its path (a wrong
    target), rather than one the target imports."""
    missing = error.name or ""
    return module_name == missing or module_name.startswith(f"{missing}.")


def run_app(args: argparse.Namespace) -> int:
    """Run the app the command line names until a signal stops it; the exit status."""
    if args.log_config is not None and (args.log_level or args.log_format):
        print(
            f"{_PROG}: --log-config replaces --log-level and --log-format; give one or the other",
            file=sys.stderr,
        )
        return 2
    try:
        configure(
            args.log_level or "info",
            args.log_format or "text",
            args.log_config,
            process=_process_tag(args),
        )
    except LogConfigError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        return _load_and_run(args)
    except signal_guard.StopSignal as stop:
        # Came while the app was imported or checked, before Trio: nothing runs yet.
        _log.warning("%s: %s received while starting, stopping at once", _PROG, stop.name)
        return _EXIT_CUT_SHORT


def _process_tag(args: argparse.Namespace) -> str | None:
    """Which process the log lines come from, when several share a stderr: the supervisor
    (``--workers``, ``--reload``) or one of its workers (``TRIO_STREAMS_WORKER``)."""
    if args.workers is not None or args.reload:
        return "supervisor"
    index = os.environ.get(WORKER_ENV)
    return None if index is None else f"worker {index}"


def _load_and_run(args: argparse.Namespace) -> int:
    """Import the app and run it (or its supervisor), logging configured. A signal before
    Trio runs raises ``StopSignal`` (the start-up guard installed by ``main``); from
    ``trio.run`` on, the guard only holds signals and the run hears them from its start."""
    try:
        app = load_app(args.app, factory=args.factory)
    except (AppNotFound, AppImportFailed) as exc:
        if exc.__cause__ is not None:
            _log.debug("%s: the traceback", _PROG, exc_info=exc.__cause__)
        # A missing extra's line ends with the command that installs it: nothing to add.
        traced = exc.__cause__ is not None and not isinstance(
            exc.__cause__, MissingExtra | ConfigurationError
        )
        hint = f"; {_TRACEBACK_HINT}" if traced else ""
        print(f"{_PROG}: {exc}{hint}", file=sys.stderr)
        # A wrong target is a usage error; code that raised while importing is a runtime one.
        return 2 if isinstance(exc, AppNotFound) else 1
    if args.workers is not None or args.reload:
        return _supervise(app, args)  # with --http, the supervisor serves it for the app
    if args.http is not None:
        try:
            _check_http_address(args)
        except TrioStreamsError as exc:
            print(f"{_PROG}: {exc}", file=sys.stderr)
            return 1
        _serve_http(app, args.http)
    serve_worker_endpoints(app)
    watch_supervisor()
    signal_guard.hold()
    try:
        graceful = app.run_until_stopped(shutdown_timeout=args.shutdown_timeout)
    except AppFailed as failure:
        report(failure, prefix=_PROG, out=sys.stderr, logger=_log, traceback_hint=_TRACEBACK_HINT)
        return 1
    return 0 if graceful else _EXIT_CUT_SHORT


def _supervise(app: App, args: argparse.Namespace) -> int:
    """``--workers`` / ``--reload``: check the app, then run it in supervised workers."""
    workers = 1 if args.workers is None else args.workers
    if args.reload and workers > 1:
        print(f"{_PROG}: --reload runs one worker; leave out --workers", file=sys.stderr)
        return 2
    for directory in args.reload_dir:
        if not Path(directory).is_dir():
            print(f"{_PROG}: --reload-dir {directory}: no such directory", file=sys.stderr)
            return 2
    if args.reload:
        require("reload", "--reload")
    problems = check_workers(app, workers, allow_broadcast=args.allow_broadcast)
    if problems:
        for problem in problems:
            print(f"{_PROG}: --workers {workers}: {problem}", file=sys.stderr)
        return 2
    policy = SupervisorPolicy(
        workers=workers,
        backoff=args.restart_backoff,
        crash_limit=args.crash_limit,
        reload=args.reload,
        reload_dirs=tuple(Path(d).resolve() for d in args.reload_dir),
    )
    signal_guard.hold()
    try:
        return trio.run(
            functools.partial(supervise, http=args.http), worker_command(_worker_argv(args)), policy
        )
    except EndpointError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return 1


def _check_http_address(args: argparse.Namespace) -> None:
    """``--http``: bind the address as the endpoints will, before the app starts, so a taken
    port (or one this machine does not have) is one line and nothing ran. (With ``--workers``
    the supervisor serves the endpoints and checks the address itself.)"""
    from ..running.http_endpoints import check_free

    check_free(*args.http)


def _serve_http(app: App, address: tuple[str, int]) -> None:
    """``--http``: the endpoints as a task of the app (with ``--workers``, the supervisor
    serves them instead, for every worker)."""
    from ..running.http_endpoints import serve_endpoints

    require("http", "--http")  # refused here, before the app starts, not in its task
    host, port = address

    @app.task
    async def http_endpoints() -> None:
        await serve_endpoints(app, host, port)


def _worker_argv(args: argparse.Namespace) -> list[str]:
    """The ``run`` options a worker gets: the supervisor's, without its own."""
    argv = [args.app]
    if args.factory:
        argv.append("--factory")
    if args.shutdown_timeout is not None:
        argv += ["--shutdown-timeout", repr(args.shutdown_timeout)]
    for flag, value in (
        ("--log-level", args.log_level),
        ("--log-format", args.log_format),
        ("--log-config", args.log_config),
    ):
        if value is not None:
            argv += [flag, value]
    return argv
