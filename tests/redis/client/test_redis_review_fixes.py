"""Regression tests for holes an independent review of the client found after its hardening:
a cluster slot left without an owner, an attribute frame after a large reply, blocking reads
whose group is named like a keyword, names that cannot be sent, and loose URLs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisClusterServers, RedisServer, redis_server
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis.client import (
    CommandEncodingError,
    RedisError,
    connect,
    key_slot,
    parse_url,
)
from trio_streams.redis.client.commands import block_seconds

# ---- "Every path that connects is paced" — also while a cluster slot has no owner ---------


@pytest.fixture(scope="module")
def cluster_without_replicas() -> Iterator[RedisClusterServers]:
    with RedisClusterServers(primaries=3, replicas=0) as cluster:
        yield cluster


def key_on(cluster: RedisClusterServers, node: RedisServer) -> str:
    for n in range(100_000):
        if cluster.node_for_slot(key_slot(f"k{n}")) is node:
            return f"k{n}"
    raise AssertionError("no key hashes to that node")


@pytest.mark.slow
async def test_a_slot_whose_primary_failed_is_paced_and_served_again_once_the_node_is_back(
    cluster_without_replicas: RedisClusterServers,
) -> None:
    cluster = cluster_without_replicas
    victim = cluster.primaries[1]
    survivor = cluster.primaries[0]
    key = key_on(cluster, victim)
    async with connect(cluster.url, connect_timeout=0.3) as client:
        await client.execute("SET", key, "v")
        victim.kill()

        async def flagged_fail() -> bool:
            await trio.lowlevel.checkpoint()
            for line in survivor.command("CLUSTER", "NODES").decode().splitlines():
                fields = line.split()
                if f":{victim.port}@" in line and "fail" in fields[2].split(","):
                    return True
            return False

        await eventually(flagged_fail, within=30, what="the survivors to flag the node FAIL")
        attempts = 0
        started = time.process_time()
        with trio.move_on_after(3):
            while True:
                attempts += 1
                try:
                    async with client.dedicated_connection(key) as connection:
                        await connection.execute("GET", key)
                except RedisError:
                    pass
        cpu = time.process_time() - started
        victim.start()
        for server in cluster.servers:
            server.wait_for_log("Cluster state changed: ok", since=0)
        value = None
        with trio.fail_after(30):
            while value is None:
                try:
                    value = await client.execute("GET", key) or b"served"
                except RedisError:
                    await trio.sleep(0.2)
    assert attempts < 100, f"{attempts} attempts in 3 s: unpaced"
    assert cpu < 1.0
    assert value is not None


# ---- "RESP3 attribute frames ... Parse and drop them" — after a large reply too ------------


async def test_an_attribute_frame_after_a_large_pipelined_reply_is_not_taken_for_a_reply() -> None:
    with redis_server("--enable-debug-command", "yes") as server:
        big = b"x" * (5 * 1024 * 1024)
        async with connect(server.url, protocol=3) as client:
            with trio.fail_after(30):
                await client.execute("SET", "big", big)
                replies = await (
                    client.pipeline()
                    .add("GET", "big")
                    .add("DEBUG", "PROTOCOL", "attrib")
                    .add("ECHO", "after")
                    .execute()
                )
                assert len(replies[0]) == len(big)
                assert replies[2] == b"after"
                assert await client.execute("ECHO", "next") == b"next"


# ---- "blocking commands not cut wrongly" — whatever the group and consumer are called -------


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        (["XREADGROUP", "GROUP", "streams", "c", "BLOCK", "1000", "STREAMS", "k", ">"], 1.0),
        (["XREADGROUP", "GROUP", "block", "c", "BLOCK", "1000", "STREAMS", "k", ">"], 1.0),
        (
            [
                "XREADGROUP",
                "GROUP",
                "g",
                "block",
                "COUNT",
                "5",
                "BLOCK",
                "250",
                "STREAMS",
                "k",
                ">",
            ],
            0.25,
        ),
        (["XREADGROUP", "GROUP", "streams", "c", "BLOCK", "0", "STREAMS", "k", ">"], None),
        (["XREAD", "COUNT", "2", "BLOCK", "500", "STREAMS", "block", "0"], 0.5),
        (["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", ">"], 0.0),
    ],
)
def test_a_blocking_reads_block_time_is_found_whatever_its_group_or_consumer_is_called(
    args: list[str], seconds: float | None
) -> None:
    assert block_seconds(args) == seconds


# ---- "Clear errors" for names that cannot be sent -----------------------------------------


@pytest.mark.parametrize("name", ["\ud800", True, 5])
async def test_a_channel_name_that_cannot_be_sent_is_refused_with_a_clear_error(
    name: object,
) -> None:
    async with connect("redis://127.0.0.1:1") as client:  # refused before anything connects
        with pytest.raises(CommandEncodingError, match="channel name"):
            async with client.subscribe([name]):  # type: ignore[list-item]
                pass


async def test_a_cluster_key_that_is_not_valid_unicode_is_refused_with_a_clear_error(
    cluster_without_replicas: RedisClusterServers,
) -> None:
    async with connect(cluster_without_replicas.url) as client:
        with pytest.raises(CommandEncodingError, match="not valid Unicode"):
            await client.execute("SET", "\ud800", "v")


# ---- "Redact credentials"; "Loose input" ---------------------------------------------------


def test_a_password_with_an_unencoded_slash_is_neither_misparsed_nor_shown() -> None:
    config = parse_url("redis://user:x/s3cr3tPW@h:1/2")
    assert config.connection.password == "x/s3cr3tPW"
    assert config.connection.db == 2
    assert config.addresses == (("h", 1),)
    assert "s3cr3tPW" not in repr(config)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://h:6379:7000", "bad host"),
        ("redis://h:6379,h2:6380", "names 2 hosts"),
        ("redis://h:1?db=1&db=2", "given twice"),
        ("redis://h:1/1?db=2", "given twice"),
    ],
)
def test_loose_host_lists_and_options_given_twice_are_refused(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        parse_url(url)


def test_a_bare_ipv6_address_is_still_a_host() -> None:
    assert parse_url("redis://::1").addresses == (("::1", 6379),)


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"client_name": "bad name"}, "spaces"),
        ({"client_name": "\ud800"}, "not valid Unicode"),
        ({"client_name": True}, "must be a str"),
        ({"password": "\ud800"}, r"not valid Unicode .*: \*\*\*"),
        ({"username": 5}, "must be a str"),
    ],
)
def test_text_options_that_cannot_be_sent_are_refused_when_the_client_is_made(
    overrides: dict[str, object], why: str
) -> None:
    with pytest.raises(ConfigurationError, match=why):
        parse_url("redis://h:1", **overrides)
