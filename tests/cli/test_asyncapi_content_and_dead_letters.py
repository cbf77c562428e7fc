"""``trio-streams asyncapi``: each message's content type is what the codec writes, and every
dead-letter destination is a channel with its handler's send, its payload and its headers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trio_streams.core.codec import encode
from trio_streams.core.transport import DEAD_LETTER_HEADERS

from .support import cli
from .test_asyncapi import valid

APPS = "tests.cli.asyncapi_dead_letters"
TEXT = "text/plain; charset=utf-8"


def document_of(name: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = cli("asyncapi", f"{APPS}:{name}", env=env)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    valid(parsed)
    return parsed


@pytest.fixture(scope="module")
def redis_document() -> dict[str, Any]:
    return document_of("redis_app")


def message_of(document: dict[str, Any], channel: str) -> dict[str, Any]:
    """The one message of ``channel``, from components."""
    (ref,) = document["channels"][channel]["messages"].values()
    key = ref["$ref"].rsplit("/", 1)[1]
    message: dict[str, Any] = document["components"]["messages"][key]
    return message


def binding(document: dict[str, Any], channel: str) -> str | None:
    method: str | None = (
        document["channels"][channel].get("bindings", {}).get("redis", {}).get("method")
    )
    return method


# ---- content types -------------------------------------------------------------------------


def test_a_str_publishers_message_has_the_content_type_the_codec_writes(tmp_path: Path) -> None:
    store = tmp_path / "receipts.ss"
    env = {"RECEIPTS_FILE": str(store)}
    assert cli("publish", str(store), "in", '{"k": 1}').returncode == 0
    ran = cli("run", f"{APPS}:receipts", env=env)
    assert ran.returncode == 0, ran.stderr
    decoded = cli("file", "decode", "--format", "ndjson", "--key", "out", str(store))
    assert decoded.returncode == 0, decoded.stderr
    stored = json.loads(decoded.stdout.splitlines()[-1])["payload"]
    assert stored == "receipt 1: 5.50"  # raw UTF-8 text, which is not JSON
    with pytest.raises(json.JSONDecodeError):
        json.loads(stored)
    out = message_of(document_of("receipts"), "file_receipts.ss_.out")
    assert out["payload"] == {"type": "string"}
    assert out["contentType"] == TEXT


def test_each_message_has_the_content_type_the_codec_writes_for_its_type() -> None:
    document = document_of("kinds")
    types = {key: m["contentType"] for key, m in document["components"]["messages"].items()}
    assert types == {
        # What the handlers read (each returns a value, so each may be a request)...
        "str.request": TEXT,
        "Bytes.request": "application/octet-stream",
        "Order.request": "application/json",
        # ...what their publishers publish...
        "Bytes": "application/octet-stream",
        "Order": "application/json",
        "dict": "application/json",
        # ...and what they reply: the same value, or their failure.
        "Bytes.reply": "application/octet-stream",
        "Order.reply": "application/json",
        "dict.reply": "application/json",
        "trio-streams.error.reply": "application/json",
    }
    # What the codec writes for each: text as it is, bytes as they are, the rest as JSON.
    assert encode("5.50 €") == "5.50 €".encode()
    assert encode(b"\xff") == b"\xff"
    assert json.loads(encode({"id": 1})) == {"id": 1}


def test_none_and_outcomes_are_not_published_so_not_documented() -> None:
    document = document_of("maybe")
    kept = message_of(document, "file_maybe.ss_.kept")
    assert kept["payload"] == {"type": "string"}
    assert kept["contentType"] == TEXT
    checked = message_of(document, "file_maybe.ss_.checked")
    assert checked["payload"] == {"$ref": "#/components/schemas/Order"}
    assert checked["contentType"] == "application/json"


def test_a_subscribed_str_payload_is_text_too(redis_document: dict[str, Any]) -> None:
    assert message_of(redis_document, "redis.jobs")["contentType"] == TEXT
    assert message_of(redis_document, "redis.news")["contentType"] == TEXT
    assert message_of(redis_document, "redis.orders")["contentType"] == "application/json"


# ---- dead letters ----------------------------------------------------------------------------


def test_a_dead_letter_on_a_stream_file_is_a_channel_with_a_send_from_its_handler() -> None:
    document = document_of("receipts")
    channel = document["channels"]["file_receipts.ss_.in.dead"]
    assert channel["address"] == "in.dead"
    assert channel["servers"] == [{"$ref": "#/servers/file_receipts.ss_"}]
    assert "bindings" not in channel
    send = document["operations"]["file_receipts.ss_.receipt.dead_letter"]
    assert send["action"] == "send"
    assert send["channel"] == {"$ref": "#/channels/file_receipts.ss_.in.dead"}
    assert "receipt" in send["summary"]


def test_a_dead_letter_carries_the_subscribed_payload_and_the_headers_saying_why() -> None:
    document = document_of("receipts")
    received = message_of(document, "file_receipts.ss_.in")
    letter = message_of(document, "file_receipts.ss_.in.dead")
    assert letter["payload"] == received["payload"]
    assert letter["contentType"] == received["contentType"] == "application/json"
    headers = letter["headers"]
    assert list(headers["properties"]) == list(DEAD_LETTER_HEADERS)
    assert headers["required"] == list(DEAD_LETTER_HEADERS)
    assert set(headers["properties"]["x-dead-letter-reason"]["enum"]) == {
        "max-attempts",
        "undecodable",
        "by-key",
        "unencodable",
    }


def test_dead_letters_on_redis_are_channels_written_as_each_source_writes_them(
    redis_document: dict[str, Any],
) -> None:
    methods = {
        key: binding(redis_document, key)
        for key in redis_document["channels"]
        if key.endswith(".dead")
    }
    assert methods == {
        "redis.orders.dead": "xadd",
        "redis.jobs.dead": "rpush",
        "redis.tasks.dead": "lpush",  # taken from the right, pushed at the left
        "redis.queue.dead": "xadd",  # dead_letter_kind="stream"
        "redis.news.dead": "publish",
        "redis.prices.dead": "spublish",
        "redis.alerts.dead": "xadd",  # dead_letter_kind="stream"
    }
    for key in methods:
        assert redis_document["channels"][key]["servers"] == [{"$ref": "#/servers/redis"}]


def test_each_subscription_sends_its_own_dead_letters(redis_document: dict[str, Any]) -> None:
    operations = redis_document["operations"]
    sends = {
        key: op["channel"]["$ref"] for key, op in operations.items() if key.endswith("dead_letter")
    }
    assert sends["redis.bill.dead_letter"] == "#/channels/redis.orders.dead"
    assert sends["redis.refund.dead_letter"] == "#/channels/redis.orders.dead"  # one channel
    assert len(sends) == 8


def test_a_batch_subscriptions_dead_letter_is_one_message_of_the_batch(
    redis_document: dict[str, Any],
) -> None:
    letter = message_of(redis_document, "redis.queue.dead")
    assert letter["payload"] == {"$ref": "#/components/schemas/Order"}
    assert message_of(redis_document, "redis.prices.dead")["contentType"] == "application/json"
    assert message_of(redis_document, "redis.news.dead")["contentType"] == TEXT
    assert message_of(redis_document, "redis.tasks.dead")["contentType"] == (
        "application/octet-stream"
    )


def test_retry_copies_have_no_channel_of_their_own(redis_document: dict[str, Any]) -> None:
    """A retry copy goes back to the stream, list or channel it came from."""
    addresses = sorted(c["address"] for c in redis_document["channels"].values())
    sources = ["alerts", "jobs", "news", "orders", "prices", "queue", "refunds", "tasks"]
    assert addresses == sorted([*sources, *(f"{s}.dead" for s in sources if s != "refunds")])


def test_a_subscription_without_a_dead_letter_has_no_dead_letter_channel() -> None:
    document = document_of("kinds")
    assert sorted(document["channels"]) == [
        "file_kinds.ss_.orders",
        "file_kinds.ss_.raw",
        "file_kinds.ss_.replies",  # the replies of its handlers, which return values
        "file_kinds.ss_.text",
        "file_kinds.ss_.totals",
    ]
    assert not [key for key in document["operations"] if "dead" in key]
