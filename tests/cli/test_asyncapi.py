"""``trio-streams asyncapi``: the document is valid AsyncAPI 3.0 and says what the app does."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from trio_streams.integrations.asyncapi import asyncapi_document

from .asyncapi_apps import app
from .support import cli, stderr_lines

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "asyncapi" / "3.0.0.json"


@cache
def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))


def valid(document: dict[str, Any]) -> None:
    errors = sorted(validator().iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    result = cli("asyncapi", "tests.cli.asyncapi_apps:app", "--app-version", "2.1.0")
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_the_document_validates_against_the_asyncapi_3_0_schema(document: dict[str, Any]) -> None:
    valid(document)
    assert document["asyncapi"] == "3.0.0"
    assert document["info"] == {"title": "shop", "version": "2.1.0"}


def test_the_validation_can_fail() -> None:
    broken = asyncapi_document(app)
    del broken["info"]["title"]
    with pytest.raises(AssertionError, match="title"):
        valid(broken)


def test_a_server_per_broker_and_never_the_password(document: dict[str, Any]) -> None:
    servers = document["servers"]
    assert servers["redis"]["host"] == "cache.internal:6380"
    assert servers["redis"]["protocol"] == "redis"
    assert servers["file_orders.ss_"]["protocol"] == "file"  # FileBroker's name: file 'orders.ss'
    assert servers["file_orders.ss_"]["pathname"] == "/orders.ss"
    assert "secret" not in json.dumps(document)


def test_channels_come_from_subscriptions_and_publishers_with_redis_bindings(
    document: dict[str, Any],
) -> None:
    channels = document["channels"]
    methods = {
        key: (c["address"], c.get("bindings", {}).get("redis", {}).get("method"))
        for key, c in channels.items()
    }
    assert methods == {
        "redis.orders": ("orders", "xreadgroup"),
        "redis.jobs": ("jobs", "blmove"),
        "redis.news._": ("news.*", "psubscribe"),
        "redis.prices": ("prices", "ssubscribe"),
        "redis.receipts": ("receipts", "xadd"),
        "redis.audit": ("audit", "rpush"),
        "file_orders.ss_.orders": ("orders", None),
        "redis.replies": (None, "publish"),  # bill returns a value: it answers requests
    }
    orders = channels["redis.orders"]
    assert orders["bindings"]["redis"]["groupName"] == "billing"
    assert orders["servers"] == [{"$ref": "#/servers/redis"}]
    on_file = channels["file_orders.ss_.orders"]
    assert on_file["servers"] == [{"$ref": "#/servers/file_orders.ss_"}]
    assert "bindings" not in on_file


def test_operations_receive_for_subscriptions_and_send_for_publishers(
    document: dict[str, Any],
) -> None:
    operations = document["operations"]
    bill = operations["redis.bill"]
    assert bill["action"] == "receive"
    assert bill["channel"] == {"$ref": "#/channels/redis.orders"}
    assert bill["description"] == "Charge an order and publish its receipt."
    send = operations["redis.receipts.send"]
    assert send["action"] == "send"
    assert send["messages"] == [{"$ref": "#/channels/redis.receipts/messages/Receipt"}]
    assert operations["redis.audit.send"]["action"] == "send"  # a publisher of its own


def test_message_schemas_come_from_the_annotations(document: dict[str, Any]) -> None:
    messages = document["components"]["messages"]
    schemas = document["components"]["schemas"]
    assert messages["Order"]["payload"] == {"$ref": "#/components/schemas/Order"}
    order = schemas["Order"]
    assert order["properties"]["currency"] == {"$ref": "#/components/schemas/Currency"}
    assert schemas["Currency"]["enum"] == ["EUR", "USD"]
    assert set(order["required"]) == {"id", "amount", "currency"}
    assert messages["Receipt"]["payload"] == {"$ref": "#/components/schemas/Receipt"}
    headline = messages["Headline"]["payload"]  # pydantic's own schema
    assert headline["properties"]["tags"]["type"] == "array"
    assert messages["Bytes"] == {
        "name": "Bytes",
        "contentType": "application/octet-stream",
        "payload": {"type": "string", "format": "binary"},
    }


def test_output_to_a_file_and_a_target_that_is_not_an_app(tmp_path: Path) -> None:
    out = tmp_path / "asyncapi.json"
    assert cli("asyncapi", "tests.cli.asyncapi_apps:app", "-o", str(out)).returncode == 0
    valid(json.loads(out.read_text()))
    result = cli("asyncapi", "tests.cli.asyncapi_apps:Order")
    assert result.returncode == 2
    assert "is the class Order, not a trio_streams.App" in stderr_lines(result)[0]
