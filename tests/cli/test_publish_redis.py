"""``trio-streams publish URL KEY [PAYLOAD]``: what it writes to Redis (a stream entry, a list
element, a Pub/Sub message) is what an app's ``RedisBroker.publish`` writes, a running app's
handlers receive it with its headers; every input form; the receipts; TLS, cluster and
sentinel URLs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.redis_servers import (
    RedisClusterServers,
    RedisSentinelServers,
    RedisServer,
    redis_server,
    server_build,
)
from tests.support import serving
from trio_streams import App, Context, Destination
from trio_streams.cli.commands import build_parser
from trio_streams.file.envelope import seal
from trio_streams.file.writer import StreamWriter
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream
from trio_streams.redis.client import Message, connect, key_slot

from .publish_redis_support import Published, command, entries, publish, server
from .support import COMMAND, ROOT

__all__ = ["server"]  # the fixture, imported for the tests here


async def publish_in_thread(*argv: str, stdin: bytes = b"") -> Published:
    """:func:`publish` from a Trio test: the command runs its own Trio, in a worker thread."""
    return await trio.to_thread.run_sync(lambda: publish(*argv, stdin=stdin))


# ---- what is written: what an app's broker writes ---------------------------------------------


async def test_a_redis_url_gets_the_stream_entry_an_apps_broker_publish_writes(
    server: RedisServer,
) -> None:
    app = App("shop")
    broker = app.broker(RedisBroker(server.url))
    async with serving(app):
        await broker.publish("by-app", b'{"id": 7}', headers={"source": "import", "t": "a=b"})
    result = await publish_in_thread(
        f"{server.url}/0", "by-cli", '{"id": 7}', "-H", "source=import", "-H", "t=a=b"
    )
    assert result.status == 0, result.err
    [(_, written)] = entries(server, "by-app")
    [(entry_id, fields)] = entries(server, "by-cli")
    assert fields == written == [b"_payload", b'{"id": 7}', b"h:source", b"import", b"h:t", b"a=b"]
    assert result.receipts == [f"by-cli id:{entry_id}"]
    assert result.err == ""


@pytest.mark.parametrize("kind", ["stream", "list", "channel"])
async def test_a_running_apps_handler_receives_what_the_command_published_with_its_headers(
    server: RedisServer, kind: str
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(server.url))
    seen: list[tuple[bytes, dict[str, str]]] = []
    got = trio.Event()
    source = {
        "stream": RedisStream("orders", group="svc"),
        "list": RedisList("orders"),
        "channel": RedisChannel("orders"),
    }[kind]

    @broker.subscriber(source)
    async def handle(body: bytes, ctx: Context) -> None:
        seen.append((body, dict(ctx.headers)))
        got.set()

    flag = [] if kind == "stream" else [f"--{kind}"]
    async with serving(app):
        result = await trio.run_process(
            [*COMMAND, "publish", server.url, "orders", '{"id": 1}', "-H", "trace-id=t1", *flag],
            capture_stdout=True, capture_stderr=True, cwd=ROOT, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        with trio.fail_after(10):
            await got.wait()
    assert seen == [(b'{"id": 1}', {"trace-id": "t1"})]
    receipt = result.stdout.decode()
    assert receipt.startswith("orders id:" if kind == "stream" else "orders ")
    if kind == "channel":
        assert receipt == "orders receivers:1\n"  # the app's subscription
    if kind == "list":
        assert receipt == "orders length:1\n"


async def test_list_pushes_the_frame_an_apps_broker_pushes_at_the_same_end(
    server: RedisServer,
) -> None:
    app = App("shop")
    broker = app.broker(RedisBroker(server.url))
    async with serving(app):
        for n in (1, 2):
            await broker.publish(Destination.list("by-app"), b"job %d" % n, headers={"n": str(n)})
    receipts = []
    for n in (1, 2):
        result = await publish_in_thread(server.url, "by-cli", f"job {n}", "-H", f"n={n}", "--list")
        assert result.status == 0, result.err
        receipts += result.receipts
    pushed = server.command("LRANGE", "by-app", 0, -1)
    assert server.command("LRANGE", "by-cli", 0, -1) == pushed  # same frames, same order
    assert receipts == ["by-cli length:1", "by-cli length:2"]  # RPUSH's reply


@pytest.mark.parametrize("sharded", [False, True], ids=["PUBLISH", "SPUBLISH"])
async def test_channel_publishes_the_frame_an_apps_broker_publishes(
    server: RedisServer, sharded: bool
) -> None:
    app = App("shop")
    broker = app.broker(RedisBroker(server.url))
    flags = ["--channel", "--sharded"] if sharded else ["--channel"]
    async with (
        connect(server.url) as redis,
        redis.subscribe(
            [] if sharded else ["news"], shard_channels=["news"] if sharded else []
        ) as raw,
        serving(app),
    ):
        news = Destination.channel("news", sharded=sharded)
        await broker.publish(news, b"hi", headers={"k": "v"})
        result = await publish_in_thread(server.url, "news", "hi", "-H", "k=v", *flags)
        with trio.fail_after(10):
            by_app, by_cli = await anext(raw), await anext(raw)
    assert result.status == 0, result.err
    assert isinstance(by_app, Message) and isinstance(by_cli, Message)
    assert by_cli.data == by_app.data
    assert by_cli.kind == ("smessage" if sharded else "message")
    assert result.receipts == ["news receivers:1"]
    assert result.err == ""


# ---- where: TLS, a cluster, a sentinel-watched primary ----------------------------------------


@pytest.fixture(scope="module")
def tls_server() -> Iterator[RedisServer]:
    if (reason := server_build().without_tls()) is not None:
        pytest.skip(reason)
    with redis_server(tls=True, tls_auth_clients="yes") as started:
        yield started


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    with RedisClusterServers(primaries=3, replicas=0) as servers:
        yield servers


@pytest.fixture(scope="module")
def sentinel() -> Iterator[RedisSentinelServers]:
    with RedisSentinelServers(replicas=1, sentinels=2) as servers:
        yield servers


def test_a_rediss_url_publishes_over_tls(tls_server: RedisServer) -> None:
    assert tls_server.url.startswith("rediss://")
    result = publish(tls_server.url, "secure", "x", "-H", "k=v")
    assert result.status == 0, result.err
    [(entry_id, fields)] = entries(tls_server, "secure")
    assert fields == [b"_payload", b"x", b"h:k", b"v"]
    assert result.receipts == [f"secure id:{entry_id}"]


async def test_a_cluster_url_publishes_each_message_to_its_keys_node(
    cluster: RedisClusterServers,
) -> None:
    keys = ["{a}orders", "{b}orders", "{c}orders"]
    assert len({id(cluster.node_for_slot(key_slot(key))) for key in keys}) > 1
    lines = "".join(json.dumps({"stream_key": key, "payload": key}) + "\n" for key in keys)
    result = await publish_in_thread(cluster.url, "--ndjson", stdin=lines.encode())
    assert result.status == 0, result.err
    assert [line.split()[0] for line in result.receipts] == keys
    async with connect(cluster.url) as redis:
        for key in keys:
            [[_, fields]] = await redis.execute("XRANGE", key, "-", "+")
            assert fields == [b"_payload", key.encode()]
    list_result = await publish_in_thread(cluster.url, "{a}jobs", "x", "--list")
    assert list_result.receipts == ["{a}jobs length:1"], list_result.err


def test_a_sentinel_url_publishes_to_the_primary_the_sentinels_name(
    sentinel: RedisSentinelServers,
) -> None:
    result = publish(sentinel.url, "orders", "x")
    assert result.status == 0, result.err
    [(entry_id, fields)] = entries(sentinel.primary(), "orders")
    assert fields == [b"_payload", b"x"]
    assert result.receipts == [f"orders id:{entry_id}"]


# ---- the input: the same forms as for a stream file ---------------------------------------------


def test_the_payload_comes_from_stdin_or_a_file_as_bytes(
    server: RedisServer, tmp_path: Path
) -> None:
    payload = tmp_path / "payload.bin"
    payload.write_bytes(bytes(range(256)))
    assert publish(server.url, "k", stdin=b"from stdin\n").status == 0
    assert publish(server.url, "k", "--file", str(payload)).status == 0
    assert [f[1] for _, f in entries(server, "k")] == [b"from stdin\n", bytes(range(256))]


def test_ndjson_publishes_a_message_a_line_each_rows_key_over_key_with_its_headers(
    server: RedisServer, tmp_path: Path
) -> None:
    # A decoded stream file: its header line, messages whose frames hold their headers in an
    # envelope, and the end-of-stream message; then lines of the write schema's own.
    path = tmp_path / "old.ss"
    writer = StreamWriter(path)
    writer.append("old", seal(b"first", {"trace": "t1"}), 1_700_000_000_000)
    writer.close(eos=True)
    decoded = command("file", "decode", str(path), "--format", "ndjson").out
    assert '"SEA_STREAMER_INTERNAL"' in decoded and '"file_header"' in decoded
    lines = decoded + "".join(
        json.dumps(row) + "\n"
        for row in (
            {"payload": "aGk=", "encoding": "base64", "headers": {"h": "1"}},
            {"payload": "x", "stream_key": "other", "seq": 9, "timestamp_ms": 5},
        )
    )
    result = publish(server.url, "orders", "--ndjson", "-H", "via=cli", stdin=lines.encode())
    assert result.status == 0, result.err
    assert [line.split()[0] for line in result.receipts] == ["old", "orders", "other"]
    assert all(line.split()[1].startswith("id:") for line in result.receipts)
    assert [f for _, f in entries(server, "old")] == [
        [b"_payload", b"first", b"h:trace", b"t1", b"h:via", b"cli"]
    ]
    assert [f for _, f in entries(server, "orders")] == [
        [b"_payload", b"hi", b"h:via", b"cli", b"h:h", b"1"]
    ]
    # seq and timestamp_ms are not used: the server gives the entry its id.
    [(entry_id, fields)] = entries(server, "other")
    assert fields == [b"_payload", b"x", b"h:via", b"cli"] and entry_id != "5-0"


def test_ndjson_to_a_list_pushes_each_rows_frame_to_its_key(server: RedisServer) -> None:
    lines = b'{"payload": "1"}\n{"payload": "2", "stream_key": "other"}\n{"payload": "3"}\n'
    result = publish(server.url, "jobs", "--ndjson", "--list", stdin=lines)
    assert result.status == 0, result.err
    assert result.receipts == ["jobs length:1", "other length:1", "jobs length:2"]


def test_an_empty_payload_is_refused_without_allow_empty_and_published_with_it(
    server: RedisServer,
) -> None:
    refused = publish(server.url, "k", stdin=b"")
    assert refused.status == 2 and "--allow-empty" in refused.err
    assert server.command("EXISTS", "k") == 0
    result = publish(server.url, "k", "--allow-empty", stdin=b"")
    assert result.status == 0, result.err
    assert [f for _, f in entries(server, "k")] == [[b"_payload", b""]]


def test_a_redis_key_a_stream_file_could_not_hold_is_published(server: RedisServer) -> None:
    for key in ("orders:{eu}", "with space", "SEA_STREAMER_INTERNAL"):
        result = publish(server.url, key, "x")
        assert result.status == 0, result.err
        assert result.receipts[0].startswith(f"{key} id:")


# ---- the receipts -------------------------------------------------------------------------------


def test_a_channel_nobody_listens_on_is_a_note_on_stderr_and_exit_0(server: RedisServer) -> None:
    result = publish(server.url, "news", "x", "--channel")
    assert result.status == 0
    assert result.receipts == ["news receivers:0"]
    assert result.err_lines == [
        "trio-streams publish: note: nobody was subscribed to channel 'news': the message "
        "reached no one (Pub/Sub keeps nothing)"
    ]
    lines = b'{"payload": "1"}\n{"payload": "2"}\n'
    many = publish(server.url, "news", "--ndjson", "--channel", "--sharded", stdin=lines)
    assert many.status == 0
    assert many.receipts == ["news receivers:0"] * 2
    assert many.err_lines == [
        "trio-streams publish: note: nobody was subscribed to sharded channel 'news': 2 of its "
        "2 messages reached no one (Pub/Sub keeps nothing)"
    ]


def test_help_shows_the_redis_form() -> None:
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    text = " ".join(commands.choices["publish"].format_help().split())
    for said in (
        "[--list | --channel] [--sharded] TARGET [KEY] [PAYLOAD]",
        "a Redis URL: redis://HOST:PORT/DB, rediss://..., redis+cluster://...",
        "KEY id:MS-SEQ for a stream entry",
        "KEY length:N with --list",
        "KEY receivers:N with --channel",
        "Redis: push to the list KEY (RPUSH)",
        "with --channel: SPUBLISH",
        "each message is written as an app's RedisBroker.publish writes it",
    ):
        assert said in text, said
