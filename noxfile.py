"""nox sessions: tests (the README test command), soak, chaos, lint, docs, bench, demo.

``nox -s tests`` is the one command that proves main works: it installs the package with its test
dependencies into a fresh virtualenv, makes sure every server binary the tests start is present
(installing Debian's package when it is missing), and runs the suite. Long soak and kill tests are
kept out of it and run with ``nox -s soak``; ``nox -s chaos`` runs the fault campaign
(docs/guides/reliability.md).
"""

from __future__ import annotations

import os
import shutil

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
    """The whole test suite, against real servers the fixtures start (README's test command)."""
    ensure_servers(session)
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "not soak", *session.posargs)


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
