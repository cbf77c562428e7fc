"""The test harness: app.test(), settling, assertions, and the pytest plugin."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import trio_streams
from trio_streams import (
    RETRY_COUNT_HEADER,
    App,
    ConfigurationError,
    Context,
    MemoryBroker,
    MemoryStream,
    ack,
    drop,
)
from trio_streams.testing import NotSettled

pytest_plugins = ["pytester"]


async def test_publish_returns_once_the_whole_reaction_settled(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    log: list[str] = []

    @broker.subscriber(MemoryStream("orders"))
    @broker.publisher("invoices")
    async def order(n: int) -> int:
        await trio.sleep(5)
        log.append(f"order {n}")
        return n

    @broker.subscriber(MemoryStream("invoices"))
    @broker.publisher("emails")
    async def invoice(n: int) -> str:
        await trio.sleep(5)
        log.append(f"invoice {n}")
        return f"mail {n}"

    @broker.subscriber(MemoryStream("emails"))
    async def email(text: str) -> None:
        log.append(text)

    async with app.test() as t:
        await t.publish("orders", 1)
        assert log == ["order 1", "invoice 1", "mail 1"]
        t.handler(order).assert_called_once_with(1)
        t.handler(email).assert_called_once_with("mail 1")
        assert t.handler(
            "test_publish_returns_once_the_whole_reaction_settled.<locals>.invoice"
        ).outcomes == [ack()]


async def test_each_broker_gets_its_own_hub_and_publish_finds_the_broker() -> None:
    app = App("svc")
    first = app.broker(MemoryBroker(name="first"))
    second = app.broker(MemoryBroker(name="second"))
    seen: list[str] = []

    @first.subscriber(MemoryStream("a"))
    async def on_first(n: int) -> None:
        seen.append(f"first {n}")

    @second.subscriber(MemoryStream("b"))
    async def on_second(n: int) -> None:
        seen.append(f"second {n}")

    async with app.test() as t:
        await t.publish("a", 1)  # only `first` reads "a"
        await t.publish("b", 2, broker=second)
        with pytest.raises(ConfigurationError, match="say which with broker="):
            await t.publish("nowhere", 3)
        assert t.published("a") == t.published("a", broker=first)
        assert t.published("a", broker=second) == []
    assert seen == ["first 1", "second 2"]


async def test_a_stuck_handler_is_reported_not_waited_on_forever(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), name="stuck")
    async def handle(n: int) -> None:
        await trio.sleep_forever()

    with pytest.raises(NotSettled, match=r"stuck \(in flight 1"):
        async with app.test(settle_timeout=3) as t:
            await t.publish("s", 1)


async def test_handler_records_refuse_unknown_handlers() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None: ...

    async def other(n: int) -> None: ...

    async with app.test() as t:
        t.handler(handle).assert_not_called()
        with pytest.raises(ConfigurationError, match="no subscription runs"):
            t.handler(other)


async def test_the_same_app_tests_again_with_fresh_state() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int, ctx: Context) -> None: ...

    async with app.test() as t:
        await t.publish("s", 1)
        assert len(t.published("s")) == 1
    async with app.test() as t:
        assert t.published("s") == []
        t.handler(handle).assert_not_called()


async def test_raise_errors_surfaces_a_handler_error_from_publish() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), max_attempts=1)
    async def handle(n: int) -> None:
        assert n > 0, "only positive numbers"

    async with app.test() as t:
        await t.publish("s", -1)  # recorded, not raised
        assert len(t.handler(handle).errors) == 1
    async with app.test(raise_errors=True) as t:
        await t.publish("s", 1)
        with pytest.raises(AssertionError, match="only positive numbers"):
            await t.publish("s", -1)
        await t.publish("s", 2)  # each error is raised once


def test_the_pytest_plugin_runs_an_app_per_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(
        """
        import pytest
        import trio
        from trio_streams import App, MemoryBroker, MemoryStream, ack, retry_after

        app = App("svc")
        broker = app.broker(MemoryBroker())

        @broker.subscriber(MemoryStream("s"))
        async def handle(n: int):
            return retry_after(60) if n < 0 else ack()

        @pytest.fixture
        def app_fixture():
            return app

        @pytest.fixture(name="app")
        def the_app():
            return app

        async def test_ack(app_client):
            await app_client.publish("s", 1)
            assert app_client.handler(handle).outcomes == [ack()]

        async def test_delay(app_client, autojump_clock):
            await app_client.publish("s", -1)
            await app_client.wait(60)
            assert app_client.handler(handle).call_count == 2
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2)


def test_importing_the_plugin_imports_neither_trio_nor_the_framework() -> None:
    """pytest loads the plugin in every run wherever trio-streams is installed: until a test
    asks for ``app_client``, it costs the packages it sits in and itself, and no Trio."""
    code = (
        "import json, sys\n"
        "import trio_streams.testing.plugin\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    root = Path(trio_streams.__file__).parent.parent  # this checkout, not another install
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    modules = json.loads(done.stdout)
    ours = [name for name in modules if name.split(".")[0] == "trio_streams"]
    assert ours == [
        "trio_streams",
        "trio_streams._moved",
        "trio_streams.testing",
        "trio_streams.testing.plugin",
    ]
    assert [name for name in modules if name.split(".")[0] == "trio"] == []


def test_the_plugin_explains_a_missing_app_fixture(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(
        """
        async def test_needs_app(app_client):
            pass
        """
    )
    result = pytester.runpytest_subprocess()
    result.stdout.fnmatch_lines(["*app_client needs an `app` fixture*"])


async def test_a_spent_delivery_is_recorded_as_skipped_not_as_a_call() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), max_attempts=2, dead_letter="dlq")
    async def handle(n: int) -> None: ...

    async with app.test() as t:
        await t.publish("s", 1, headers={RETRY_COUNT_HEADER: "2"})  # tried twice already
        await t.publish("s", 2)
        record = t.handler(handle)
        assert record.messages == [2]
        assert record.call_count == 1
        [skipped] = record.skipped
        assert not skipped.called and skipped.message is None
        assert skipped.delivery.payload == b"1"
        assert record.settled == [drop(), ack()]
        assert record.dead_lettered == [skipped]
