"""The arguments of ``trio-streams run MODULE:ATTRIBUTE`` (the command is :mod:`..run`)."""

from __future__ import annotations

import argparse

from ..args import at_least_one, deferred, http_address, seconds

__all__ = ["register"]


def register(parser: argparse.ArgumentParser) -> None:
    """Give ``run`` its description and arguments."""
    from ...core.logs import FORMATS, LEVELS

    parser.description = (
        "Import MODULE:ATTRIBUTE and run the App it names. The first SIGINT or "
        "SIGTERM drains in-flight work; a second one cancels at once. Exit status: 0 after a "
        "graceful stop, 1 when the app's module raised while importing, the app did not start "
        "or a subscription failed (one line per error on stderr), 2 for a bad command line or "
        "a wrong target (no such module or attribute, not an App), 130 when "
        "a signal stopped it while it was starting (at once: importing, in a startup hook, "
        "connecting) or a second signal cut the drain short. With --workers, the supervisor "
        "exits 1 when a worker keeps crashing."
    )
    parser.add_argument("app", metavar="MODULE:ATTRIBUTE", help="where the App is, e.g. svc:app")
    parser.add_argument(
        "--factory", action="store_true", help="ATTRIBUTE is a function that returns the App"
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=seconds(unbounded=True),
        default=None,
        metavar="SECONDS",
        help="how long a graceful shutdown may drain before cancelling, >= 0 (default: the app's)",
    )
    parser.add_argument(
        "--http",
        type=http_address,
        default=None,
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz on HOST:PORT from the app (default: off; "
        "needs the http extra, and prometheus for /metrics); with --workers, the supervisor "
        "serves them for the whole app, each worker's series labelled worker",
    )
    processes = parser.add_argument_group("processes")
    processes.add_argument(
        "--workers",
        type=at_least_one,
        default=None,
        metavar="N",
        help="run the app in N worker processes under a supervisor that forwards signals and "
        "restarts a crashed worker (default: the app runs in this process, unsupervised); "
        "with N > 1, subscriptions that would deliver every message to every worker are "
        "refused",
    )
    processes.add_argument(
        "--allow-broadcast",
        action="store_true",
        help="with --workers: let every worker read every message of subscriptions that do "
        "not share work across processes (stream files, Pub/Sub, plain stream reads)",
    )
    processes.add_argument(
        "--restart-backoff",
        type=seconds(unbounded=True),
        default=0.5,
        metavar="SECONDS",
        help="the first pause before a crashed worker is restarted; it doubles, to 30 s "
        "(default: 0.5)",
    )
    processes.add_argument(
        "--crash-limit",
        type=at_least_one,
        default=5,
        metavar="N",
        help="give up (exit 1) when one worker crashes N times within a minute (default: 5)",
    )
    processes.add_argument(
        "--reload",
        action="store_true",
        help="for development: restart the app (after a clean drain) when a .py file changes",
    )
    processes.add_argument(
        "--reload-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="with --reload: a directory to watch (repeatable; default: the current one)",
    )
    logs = parser.add_argument_group("logging (to stderr)")
    logs.add_argument(
        "--log-level",
        type=str.lower,
        choices=LEVELS,
        default=None,
        help="the root logger's level (default: info); debug adds tracebacks",
    )
    logs.add_argument(
        "--log-format",
        choices=FORMATS,
        default=None,
        help="text: one line per record (default); json: one JSON object per line with "
        "time, level, logger, message and exc_info",
    )
    logs.add_argument(
        "--log-config",
        metavar="FILE",
        default=None,
        help="a JSON logging.config.dictConfig file; it replaces --log-level and --log-format",
    )
    parser.set_defaults(handler=deferred("trio_streams.cli.run", "run_app"))
