"""``trio-streams asyncapi`` for handlers that publish through another broker than they read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .support import cli, stderr_lines
from .test_asyncapi import valid

APPS = "tests.cli.asyncapi_two_brokers"


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    """Each app's document, as the command writes it."""
    found = {}
    for name in ("redis_to_file", "two_redis", "both"):
        result = cli("asyncapi", f"{APPS}:{name}")
        assert result.returncode == 0, result.stderr
        found[name] = json.loads(result.stdout)
    return found


def channel_map(document: dict[str, Any]) -> dict[str, tuple[str, str, str | None]]:
    """Each channel's address, server and Redis method (None: no binding)."""
    return {
        key: (
            channel["address"],
            channel["servers"][0]["$ref"],
            channel.get("bindings", {}).get("redis", {}).get("method"),
        )
        for key, channel in document["channels"].items()
    }


def sends(document: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """Each send operation's channel and the messages it names."""
    return {
        key: (op["channel"]["$ref"], [m["$ref"] for m in op["messages"]])
        for key, op in document["operations"].items()
        if op["action"] == "send"
    }


@pytest.mark.parametrize("app", ["redis_to_file", "two_redis", "both"])
def test_the_whole_document_validates_against_the_asyncapi_3_0_schema(
    documents: dict[str, dict[str, Any]], app: str
) -> None:
    valid(documents[app])


def test_each_publisher_is_described_on_its_own_broker(
    documents: dict[str, dict[str, Any]],
) -> None:
    document = documents["redis_to_file"]
    assert channel_map(document) == {
        "redis.orders": ("orders", "#/servers/redis", "xreadgroup"),
        "file_shop.ss_.receipts": ("receipts", "#/servers/file_shop.ss_", None),
        # bill returns a value, so it answers requests: its replies go from the broker it
        # reads, whatever broker its publishers write to.
        "redis.replies": (None, "#/servers/redis", "publish"),
    }
    assert document["servers"]["file_shop.ss_"]["pathname"] == "/shop.ss"
    assert "bindings" not in document["channels"]["file_shop.ss_.receipts"]


def test_a_publisher_on_another_broker_has_its_payload_schema_from_the_return_annotation(
    documents: dict[str, dict[str, Any]],
) -> None:
    document = documents["redis_to_file"]
    assert sends(document) == {
        "file_shop.ss_.receipts.send": (
            "#/channels/file_shop.ss_.receipts",
            ["#/channels/file_shop.ss_.receipts/messages/Receipt"],
        )
    }
    assert document["operations"]["file_shop.ss_.receipts.send"]["summary"] == "what bill returns"
    receipt = document["components"]["messages"]["Receipt"]
    assert receipt["payload"] == {"$ref": "#/components/schemas/Receipt"}
    assert set(document["components"]["schemas"]["Receipt"]["required"]) == {"order", "paid"}
    channel = document["channels"]["file_shop.ss_.receipts"]
    assert channel["messages"] == {"Receipt": {"$ref": "#/components/messages/Receipt"}}


def test_two_brokers_of_the_same_kind_are_two_servers_each_with_its_own_channels(
    documents: dict[str, dict[str, Any]],
) -> None:
    document = documents["two_redis"]
    hosts = {key: server["host"] for key, server in document["servers"].items()}
    assert hosts == {"redis": "primary.internal:6379", "redis_2": "archive.internal:6379"}
    assert channel_map(document) == {
        "redis.orders": ("orders", "#/servers/redis", "xreadgroup"),
        "redis_2.receipts": ("receipts", "#/servers/redis_2", "rpush"),
        "redis.replies": (None, "#/servers/redis", "publish"),
    }
    assert sends(document) == {
        "redis_2.receipts.send": (
            "#/channels/redis_2.receipts",
            ["#/channels/redis_2.receipts/messages/Receipt"],
        )
    }


def test_a_handler_with_publishers_on_both_brokers_sends_its_return_to_each(
    documents: dict[str, dict[str, Any]],
) -> None:
    document = documents["both"]
    assert channel_map(document) == {
        "redis.orders": ("orders", "#/servers/redis", "xreadgroup"),
        "redis.receipts": ("receipts", "#/servers/redis", "xadd"),
        "file_shop.ss_.receipts": ("receipts", "#/servers/file_shop.ss_", None),
        "redis.replies": (None, "#/servers/redis", "publish"),
    }
    assert sends(document) == {
        "redis.receipts.send": (
            "#/channels/redis.receipts",
            ["#/channels/redis.receipts/messages/Receipt"],
        ),
        "file_shop.ss_.receipts.send": (
            "#/channels/file_shop.ss_.receipts",
            ["#/channels/file_shop.ss_.receipts/messages/Receipt"],
        ),
    }
    assert set(document["components"]["messages"]) == {
        "Order.request",
        "Receipt",
        "Receipt.reply",
        "trio-streams.error.reply",
    }


def test_a_publisher_on_no_broker_is_refused_in_one_line_naming_it() -> None:
    result = cli("asyncapi", f"{APPS}:unmounted")
    assert result.returncode == 2
    assert stderr_lines(result) == [
        f"trio-streams asyncapi: {APPS}:unmounted: publisher 'receipts' belongs to a router "
        "not yet included in a broker"
    ]
