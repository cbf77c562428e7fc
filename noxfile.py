"""nox sessions: tests (the README test command), slow, redis-matrix, soak, chaos, lint, docs,
bench, demo.

``nox -s tests`` is the one command that proves main works: it installs the package with its test
dependencies into a fresh virtualenv, makes sure every server binary the tests start is present
(installing Debian's package when it is missing), and runs the suite but its slow and soak tests
(``-m "not soak and not slow"``, about 3,600 tests). ``nox -s slow`` runs the slow ones (``-m
"slow and not soak"``, about 250): each takes more than a few seconds on an idle 2-core machine —
kill campaigns with real processes, supervisors and their workers, the docs' pages run as written,
fresh installs, the CLI's table of mistakes (a process each), large sizes. The two together are
everything but the soak, and CI runs both (``.ci/run``). Long soak and kill tests run with ``nox
-s soak``; ``nox -s chaos`` runs the fault campaign (docs/guides/reliability.md). ``nox -s
redis-matrix`` runs the Redis suites on every Redis and Valkey server of the matrix
(``tests/server_matrix.py``; docs/guides/operations.md, "Which servers"); ``nox -s
redis-matrix-ci`` is the part of it CI runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
#: Debian packages that provide the binaries the tests start (servers, and the terminal the
#: live view of `trio-streams top` is checked in), by binary name.
SERVER_PACKAGES = {"redis-server": "redis-server", "tmux": "tmux"}


def ensure_servers(session: nox.Session) -> None:
    """Install the Debian package of every missing server binary; fail loudly if that is impossible.

    Tests start their own servers on free loopback ports; they never skip because one is absent.
    """
    missing = sorted(
        {pkg for binary, pkg in SERVER_PACKAGES.items() if shutil.which(binary) is None}
    )
    if not missing:
        return
    if shutil.which("apt-get") is None:
        session.error(f"missing server binaries {missing} and no apt-get to install them")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run(*sudo, "apt-get", "update", "-q", external=True, env=env)
    session.run(*sudo, "apt-get", "install", "-y", "-q", *missing, external=True, env=env)
    # The package starts a system-wide server on the default port; the tests never use it.


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite but its slow and soak tests, against real servers the fixtures start
    (README's test command)."""
    ensure_servers(session)
    session.install("-e", ".[test]")
    session.run("pytest", *WORKERS, "-m", "not soak and not slow", *session.posargs)


@nox.session(python=PYTHON)
def slow(session: nox.Session) -> None:
    """The slow tests (the ``slow`` mark: each more than a few seconds on an idle 2-core
    machine); with ``tests`` it makes everything but the soak."""
    ensure_servers(session)
    session.install("-e", ".[test]")
    session.run("pytest", *WORKERS, "-m", "slow and not soak", *session.posargs)


#: The suite runs on two pytest-xdist workers: its tests wait on servers and subprocesses as
#: much as they compute, so two keep a 2-core machine busy without starving either (each
#: worker starts its own servers on free ports, and its own cluster). A worker that runs out
#: of tests steals from the other (``worksteal``), so one long test at the end of a worker's
#: share no longer leaves the other idle.
WORKERS = ("-n", "2", "--dist", "worksteal")
#: The servers of the matrix, by name (tests/server_matrix.py says where each comes from).
MATRIX = ("redis-7.0", "redis-8.2", "valkey-9.1", "valkey-8.0")
#: What runs on each server: every Redis test but the long soak, and the conformance suite's
#: Redis transports (its memory and file ones do not touch a server). The Redis tests include
#: the window's (tests/redis/window, its kill tests among them) and the small kill campaigns
#: the soak scales up (tests/redis/test_attempts_are_runs.py).
MATRIX_SELECTION = (
    "tests/redis", "tests/conformance", "-k", "redis or not conformance", "-m", "not soak",
)  # fmt: skip
#: ``--soak`` adds the Redis soak: 30 kills over 50k entries, per consumer kind.
SOAK_SELECTION = ("tests/redis", "-m", "soak")
#: What CI runs on each server but Debian's Redis (which ``tests`` covers whole), about a
#: minute each on 2 cores: what the server decides — the client's commands, connections,
#: cluster and sentinel sets (the harness on the server's own words), TLS or its skip; what its
#: command table offers (capabilities, key specs, the library's name, the compatibility table);
#: consumer groups with the features that depend on the server (trimming, deleting on ack,
#: hygiene, moving a group); the pipeline window; the conformance suite's Redis transports.
#: The rest runs the same code against the same commands on any server, and is left to
#: ``redis-matrix``.
CI_SELECTION = (
    "tests/redis/client/test_redis_capabilities.py", "tests/redis/client/test_redis_key_specs.py",
    "tests/redis/client/test_redis_library_name.py", "tests/redis/client/test_server_binaries.py",
    "tests/redis/client/test_redis_connection.py", "tests/redis/client/test_redis_commands.py",
    "tests/redis/client/test_redis_cluster.py", "tests/redis/client/test_redis_sentinel.py",
    "tests/redis/test_compatibility_table.py", "tests/redis/streams/test_trim.py",
    "tests/redis/streams/test_delete_policy.py", "tests/redis/streams/test_consumer_hygiene.py",
    "tests/redis/streams/test_group_position.py", "tests/redis/streams/test_groups.py",
    "tests/redis/streams/test_publish_and_read.py", "tests/redis/window/test_window.py",
    "tests/conformance", "-k", "redis or not conformance", "-m", "not soak",
)  # fmt: skip


def _matrix(session: nox.Session, servers: list[str], selection: tuple[str, ...]) -> None:
    """Run ``selection`` on each server (a matrix name, installed first, or a binary's path),
    one after the other, and print each one's counts; fail if any failed."""
    ensure_servers(session)
    session.install("-e", ".[test]")
    names = [server for server in servers if "/" not in server]
    if names:
        session.run("python", "-m", "tests.server_matrix", "install", *names)
    rows: list[tuple[str, int, int, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="trio-streams-matrix-") as reports:
        for server in servers:
            report = Path(reports) / f"{len(rows)}.xml"
            env = {"TRIO_STREAMS_REDIS_SERVER": server}
            session.log(f"redis-matrix: {server}")
            started = time.monotonic()
            session.run(
                "pytest", *WORKERS, *selection, f"--junitxml={report}", "-p", "no:cacheprovider",
                env=env, success_codes=[0, 1],
            )  # fmt: skip
            rows.append((server, *_counts(report), time.monotonic() - started))
    session.log("redis-matrix: server       passed skipped failed  minutes")
    for server, passed, skipped, failed, seconds in rows:
        session.log(
            f"redis-matrix: {server:12} {passed:6} {skipped:7} {failed:6} {seconds / 60:8.1f}"
        )
    if broken := [row[0] for row in rows if row[3]]:
        session.error(f"tests failed on {', '.join(broken)}")


def _counts(report: Path) -> tuple[int, int, int]:
    """Passed, skipped and failed (errors included) from a pytest JUnit XML report."""
    if not report.exists():
        return 0, 0, 1  # pytest stopped before writing it: count the run as failed
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    return tests - skipped - failed, skipped, failed


@nox.session(name="redis-matrix", python=PYTHON)
def redis_matrix(session: nox.Session) -> None:
    """The Redis suites on each server of the matrix, before a release: ``-- NAME|PATH ...``
    chooses servers (all four by default), ``--soak`` adds the Redis soak."""
    soak = "--soak" in session.posargs
    servers = [arg for arg in session.posargs if arg != "--soak"] or list(MATRIX)
    _matrix(session, servers, MATRIX_SELECTION)
    if soak:
        _matrix(session, servers, SOAK_SELECTION)


@nox.session(name="redis-matrix-ci", python=PYTHON)
def redis_matrix_ci(session: nox.Session) -> None:
    """What CI runs of the matrix: :data:`CI_SELECTION` on every server but Debian's Redis,
    which ``nox -s tests`` runs whole."""
    _matrix(session, session.posargs or list(MATRIX[1:]), CI_SELECTION)


@nox.session(python=PYTHON)
def soak(session: nox.Session) -> None:
    """Long soak and kill tests: crash-recovery under sustained load."""
    ensure_servers(session)
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "soak", *session.posargs)


@nox.session(python=PYTHON)
def chaos(session: nox.Session) -> None:
    """The campaign: a seeded mix of faults over every transport, one row each (about 10
    minutes on 2 cores). Options go to ``python -m tests.chaos``: ``-- --minutes 3 --seed 7``."""
    ensure_servers(session)
    session.install("-e", ".[test]")
    session.run("python", "-m", "tests.chaos", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (with the ASYNC rules and the complexity cap), mypy --strict over the package, tests
    and benchmarks, and the import contracts between the layers (docs/architecture.md, "Layout")."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("lint-imports")  # the contracts: pyproject.toml, [tool.importlinter]
    session.run("python", "-m", "tests.docs_blocks")  # the docs' examples, mypy --strict


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation strictly and run the tutorial as written."""
    session.install("-e", ".[docs,test]")
    session.run("mkdocs", "build", "--strict")
    session.run("pytest", "tests/test_docs.py")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Every benchmark script; each prints its figure and a ratio against a peer of the same run."""
    ensure_servers(session)
    session.install("-e", ".[bench]")
    scripts = session.posargs or sorted(
        os.path.join("benchmarks", name)
        for name in os.listdir("benchmarks")
        if name.endswith(".py") and not name.startswith("_")
    )
    for script in scripts:
        session.run("python", script)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README demo: a small order-processing app that runs and finishes by itself."""
    session.install("-e", ".")
    session.run("python", "examples/demo.py", *session.posargs)
