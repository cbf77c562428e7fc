"""trio-streams installed as a new user does it from a clone: ``pip install .``, no extra.

One virtual environment for the module (made with ``python -m venv`` under pytest's temporary
directory, the project installed into it from this source tree by pip, its dependencies from
the package index), then the installed ``trio-streams`` console script run in it, as the user
would: the command line and stream-file apps work; a feature whose extra is missing is refused
before the app starts, in one line naming the extra and the pip command for this install.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from trio_streams.core.extras import EXTRAS

from ..cli.support import cli, stderr_lines
from .support import run_in

#: A fresh virtual environment and a pip install from the package index: slow (``nox -s slow``).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VECTOR = ROOT / "tests" / "data" / "vectors" / "one-key-1024.ss"


@dataclass(frozen=True)
class PlainInstall:
    """A virtual environment holding trio-streams without extras, and a directory of apps."""

    venv: Path
    apps: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``trio-streams ARGS`` from this environment, in the apps' directory."""
        return self.command(str(self.venv / "bin" / "trio-streams"), *args)

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        return self.command(str(self.venv / "bin" / "python"), "-c", code)

    def command(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return run_in(self.apps, *argv)


APPS = {
    "file_app.py": """
        from trio_streams import App
        from trio_streams.file import FileBroker, FileStream

        app = App("file-only")
        log = app.broker(FileBroker("orders.ss"))
        seen: list[bytes] = []


        @log.subscriber(FileStream("orders").replay())
        async def handle(body: bytes) -> None:
            seen.append(body)


        @app.after_shutdown
        async def report() -> None:
            print("handled", len(seen))
    """,
    "redis_app.py": """
        from trio_streams import App
        from trio_streams.redis import RedisBroker, RedisStream

        app = App("redis")
        bus = app.broker(RedisBroker("redis://127.0.0.1:9"))


        @bus.subscriber(RedisStream("orders"))
        async def handle(body: bytes) -> None: ...
    """,
    "redis_app_test.py": """
        import trio

        from trio_streams import App
        from trio_streams.redis import RedisBroker, RedisStream

        app = App("redis")
        bus = app.broker(RedisBroker("redis://127.0.0.1:9"))
        seen: list[bytes] = []


        @bus.subscriber(RedisStream("orders"))
        async def handle(body: bytes) -> None:
            seen.append(body)


        async def main() -> None:
            async with app.test() as t:
                await t.publish("orders", b"one")
            print("handled", seen)


        trio.run(main)
    """,
    "redis_factory.py": """
        from trio_streams import App
        from trio_streams.redis import RedisBroker


        def make() -> App:
            app = App("redis")
            app.broker(RedisBroker("redis://127.0.0.1:9"))
            return app
    """,
    "prometheus_app.py": """
        from trio_streams import App
        from trio_streams.prometheus import PrometheusMiddleware

        app = App("metrics", middlewares=[PrometheusMiddleware()])
    """,
    "otel_app.py": """
        from trio_streams import App
        from trio_streams.otel import TracingMiddleware

        app = App("traces", middlewares=[TracingMiddleware()])
    """,
    "started_app.py": """
        from pathlib import Path

        from trio_streams import App

        app = App("started")


        @app.on_startup
        async def started() -> None:
            Path("started").touch()
    """,
}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> PlainInstall:
    base = tmp_path_factory.mktemp("plain-install")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    apps = base / "apps"
    apps.mkdir()
    for name, source in APPS.items():
        (apps / name).write_text(textwrap.dedent(source))
    (apps / "orders.ss").write_bytes(VECTOR.read_bytes())
    return PlainInstall(venv, apps)


def _refused(result: subprocess.CompletedProcess[str], command: str, extra: str) -> str:
    """The one line a refusal for a missing ``extra`` writes; checks what it says."""
    assert result.returncode == 2, result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(f"{command}: "), line
    assert f"needs the '{extra}' extra" in line, line
    # Installed from this source tree (not editable): the command names it.
    # ... through the pip of the installation's own interpreter, not whichever is on the PATH.
    assert line.endswith(f"/bin/python -m pip install {shlex.quote(f'{ROOT}[{extra}]')}"), line
    return line


def test_a_plain_install_brings_no_extra(plain: PlainInstall) -> None:
    modules = [module for extra in EXTRAS.values() for module in extra.modules]
    result = plain.python(
        f"import importlib.util as u; print([m for m in {modules!r} if u.find_spec(m) is not None])"
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_help_works_on_a_plain_install(plain: PlainInstall) -> None:
    result = plain.run("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: trio-streams")
    assert result.stderr == ""


def test_file_decode_works_on_a_plain_install(plain: PlainInstall) -> None:
    result = plain.run("file", "decode", str(VECTOR))
    assert result.returncode == 0, result.stderr
    assert result.stdout == cli("file", "decode", str(VECTOR)).stdout  # as with every extra
    assert result.stdout.count("\n") > 100


def test_a_file_only_app_runs_on_a_plain_install(plain: PlainInstall) -> None:
    result = plain.run("run", "file_app:app")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "handled 200"


def test_a_redis_app_is_refused_in_one_line_naming_the_redis_extra(plain: PlainInstall) -> None:
    line = _refused(plain.run("run", "redis_app:app"), "trio-streams run", "redis")
    assert "RedisBroker" in line and "hiredis" in line


def test_a_factory_refused_for_a_missing_extra_exits_2_as_an_import_does(
    plain: PlainInstall,
) -> None:
    line = _refused(
        plain.run("run", "redis_factory:make", "--factory"), "trio-streams run", "redis"
    )
    assert "redis_factory:make" in line and "RedisBroker" in line


def test_a_redis_app_is_tested_in_memory_on_a_plain_install(plain: PlainInstall) -> None:
    result = plain.command(str(plain.venv / "bin" / "python"), "redis_app_test.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "handled [b'one']"


def test_run_of_a_redis_app_is_refused_in_one_line_before_it_starts(plain: PlainInstall) -> None:
    result = plain.python(
        "from redis_app import app\n"
        "try:\n"
        "    app.run()\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code)\n"
    )
    assert result.stdout.strip() == "exit 1", result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 1 and "RedisBroker needs the 'redis' extra" in lines[0], result.stderr


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["top", "redis://127.0.0.1:9", "--once"], "trio-streams top"),
        (["record", "redis://127.0.0.1:9", "orders", "--to", "copy.ss"], "trio-streams record"),
        (["replay", "orders.ss", "--to", "redis://127.0.0.1:9"], "trio-streams replay"),
        (["publish", "redis://127.0.0.1:9/0", "orders", "{}"], "trio-streams publish"),
    ],
)
def test_redis_commands_are_refused_in_one_line_naming_the_redis_extra(
    plain: PlainInstall, argv: list[str], command: str
) -> None:
    _refused(plain.run(*argv), command, "redis")
    assert not (plain.apps / "copy.ss").exists()


def test_asyncapi_of_a_redis_app_is_refused_in_one_line_naming_the_redis_extra(
    plain: PlainInstall,
) -> None:
    _refused(plain.run("asyncapi", "redis_app:app"), "trio-streams asyncapi", "redis")


def test_top_of_an_app_is_refused_before_any_request_naming_the_prometheus_extra(
    plain: PlainInstall,
) -> None:
    # Nothing listens at port 9: a request would fail differently.
    line = _refused(
        plain.run("top", "http://127.0.0.1:9", "--once"), "trio-streams top", "prometheus"
    )
    assert "/metrics" in line


def test_run_http_is_refused_before_the_app_starts(plain: PlainInstall) -> None:
    result = plain.run("run", "started_app:app", "--http", "127.0.0.1:9")
    _refused(result, "trio-streams run", "http")
    assert not (plain.apps / "started").exists()


def test_run_reload_is_refused_before_the_app_starts(plain: PlainInstall) -> None:
    result = plain.run("run", "started_app:app", "--reload")
    _refused(result, "trio-streams run", "reload")
    assert not (plain.apps / "started").exists()


def test_a_prometheus_app_is_refused_in_one_line_naming_the_prometheus_extra(
    plain: PlainInstall,
) -> None:
    line = _refused(plain.run("run", "prometheus_app:app"), "trio-streams run", "prometheus")
    assert "trio_streams.prometheus" in line


def test_an_otel_app_is_refused_in_one_line_naming_the_otel_extra(plain: PlainInstall) -> None:
    line = _refused(plain.run("run", "otel_app:app"), "trio-streams run", "otel")
    assert "trio_streams.otel" in line


def test_the_live_view_of_top_is_refused_naming_the_tui_extra(plain: PlainInstall) -> None:
    line = _refused(plain.run("top", "orders.ss"), "trio-streams top", "tui")
    assert "--once" in line


def test_the_error_is_typed_and_says_where_it_came_from(plain: PlainInstall) -> None:
    result = plain.python(
        "from trio_streams.core.extras import MissingExtra\n"
        "from trio_streams.redis.client import connect\n"
        "try:\n"
        "    connect('redis://127.0.0.1:9')\n"
        "except MissingExtra as exc:\n"
        "    print(isinstance(exc, ImportError), exc.extra, exc.name, exc.command)\n"
    )
    assert result.stdout.split(" ", 3) == [
        "True",
        "redis",
        "hiredis",
        f"{shlex.quote(str(plain.venv / 'bin' / 'python'))} -m pip install "
        f"{shlex.quote(f'{ROOT}[redis]')}\n",
    ], result.stderr
