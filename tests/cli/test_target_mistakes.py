"""``trio-streams run`` refuses a target module's mistakes before anything starts: one line on
stderr naming the cause, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from .support import cli, one_error_line

PREFIX = "trio-streams run: "


def run_module(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Write ``source`` as the module ``target`` in ``tmp_path`` and run ``target:app``."""
    (tmp_path / "target.py").write_text(textwrap.dedent(source))
    return cli("run", "target:app", *args, env={"PYTHONPATH": str(tmp_path)})


def the_one_line(result: subprocess.CompletedProcess[str]) -> str:
    return one_error_line(result, 2, PREFIX)


def test_a_redis_dead_letter_its_own_subscription_reads_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    # Refused at mount, as the module is imported: nothing connects (no server is there).
    result = run_module(
        tmp_path,
        """
        from trio_streams import App
        from trio_streams.redis import RedisBroker, RedisStream

        app = App("loop")
        redis = app.broker(RedisBroker("redis://127.0.0.1:1"))

        @redis.subscriber(RedisStream("loop"), dead_letter="loop")
        async def h(o: dict) -> None:
            raise ValueError("bad")
        """,
    )
    line = the_one_line(result)
    assert "dead_letter 'loop' is read by its own subscription" in line, line


def test_a_stream_file_dead_letter_its_own_subscription_reads_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    result = run_module(
        tmp_path,
        f"""
        from trio_streams import App
        from trio_streams.file import FileBroker, FileStream

        app = App("loop")
        log = app.broker(FileBroker({str(tmp_path / "orders.ss")!r}))

        @log.subscriber(FileStream("orders"), dead_letter="orders")
        async def h(o: dict) -> None:
            raise ValueError("bad")
        """,
    )
    line = the_one_line(result)
    assert "dead_letter 'orders' is read by its own subscription" in line, line
    assert not (tmp_path / "orders.ss").exists()  # nothing started


@pytest.mark.slow
def test_a_module_level_app_run_is_refused_with_the_main_guard_hint_before_anything_starts(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "started"
    result = run_module(
        tmp_path,
        f"""
        from pathlib import Path

        from trio_streams import App
        from trio_streams.memory import MemoryBroker, MemoryStream

        app = App("twice")
        broker = app.broker(MemoryBroker())

        @broker.subscriber(MemoryStream("s").replay())  # ends at once: the run returns
        async def h(n: int) -> None: ...

        @app.on_startup
        def started() -> None:
            Path({str(marker)!r}).write_text("started")

        app.run()
        """,
    )
    line = the_one_line(result)
    assert "app.run() was called while `trio-streams run` imports 'target'" in line, line
    assert 'if __name__ == "__main__":' in line, line
    assert not marker.exists()  # the app never started


@pytest.mark.slow
def test_app_run_under_the_main_guard_is_left_alone(tmp_path: Path) -> None:
    # Imported by the CLI, the guard keeps app.run() from running: the CLI runs the app (it
    # has nothing to read, so it stops at once by itself).
    result = run_module(
        tmp_path,
        """
        from trio_streams import App
        from trio_streams.memory import MemoryBroker, MemoryStream

        app = App("guarded")
        broker = app.broker(MemoryBroker())

        @broker.subscriber(MemoryStream("s").replay())
        async def h(n: int) -> None: ...

        if __name__ == "__main__":
            app.run()
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "guarded: running" in result.stderr


@pytest.mark.slow
def test_a_broker_with_subscribers_that_is_not_registered_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.ss"
    result = run_module(
        tmp_path,
        f"""
        from trio_streams import App
        from trio_streams.file import FileBroker, FileStream

        app = App("x")
        log = FileBroker({str(path)!r})

        @log.subscriber(FileStream("orders"))
        async def h(n: int) -> None: ...
        """,
    )
    line = the_one_line(result)
    assert f"FileBroker 'log' (file {str(path)!r}) in module 'target'" in line, line
    assert "has 1 subscription(s) but no app registers it" in line, line
    assert line.endswith("add app.broker(log)"), line


@pytest.mark.slow
def test_a_broker_without_subscribers_that_is_not_registered_is_left_alone(
    tmp_path: Path,
) -> None:
    # A broker only published through (from a task, say) needs no registration check here.
    result = run_module(
        tmp_path,
        """
        from trio_streams import App
        from trio_streams.memory import MemoryBroker, MemoryStream

        app = App("x")
        spare = MemoryBroker()
        broker = app.broker(MemoryBroker())

        @broker.subscriber(MemoryStream("s").replay())
        async def h(n: int) -> None: ...
        """,
    )
    assert result.returncode == 0, result.stderr


def test_an_unregistered_broker_is_refused_with_a_factory_too(tmp_path: Path) -> None:
    result = run_module(
        tmp_path,
        """
        from trio_streams import App
        from trio_streams.memory import MemoryBroker, MemoryStream

        orders = MemoryBroker()

        @orders.subscriber(MemoryStream("s"))
        async def h(n: int) -> None: ...

        def app() -> App:
            return App("made")
        """,
        "--factory",
    )
    line = the_one_line(result)
    assert "MemoryBroker 'orders'" in line and "add app.broker(orders)" in line, line


def test_a_broker_another_app_of_the_module_registers_is_left_alone(tmp_path: Path) -> None:
    result = run_module(
        tmp_path,
        """
        from trio_streams import App
        from trio_streams.memory import MemoryBroker, MemoryStream

        app = App("x")
        broker = app.broker(MemoryBroker())

        @broker.subscriber(MemoryStream("s").replay())
        async def h(n: int) -> None: ...

        other = App("other")
        theirs = other.broker(MemoryBroker())

        @theirs.subscriber(MemoryStream("t"))
        async def g(n: int) -> None: ...
        """,
    )
    assert result.returncode == 0, result.stderr
