"""``trio-streams asyncapi``: a subscriber whose handler returns a value describes a
request-reply operation: its ``reply`` (where the request says, with the reply's messages), the
request headers on its request message, and a correlation id on both."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jsonschema
import pytest

from trio_streams import Middleware, PublishCall
from trio_streams.core.replies import CORRELATION_HEADER, ERROR_HEADER, REPLY_TO_HEADER, RemoteError
from trio_streams.integrations.asyncapi import asyncapi_document

from .asyncapi_replies import Order, memory_app
from .support import cli
from .test_asyncapi import valid

APP = "tests.cli.asyncapi_replies:app"
ERROR_REPLY = "trio-streams.error.reply"
REPLY_TO_LOCATION = f"$message.header#/{REPLY_TO_HEADER}"
CORRELATION_LOCATION = f"$message.header#/{CORRELATION_HEADER}"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    result = cli("asyncapi", APP)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    """What a local ``$ref`` points at (a ``#/a/b`` JSON pointer)."""
    found: Any = document
    for part in ref.removeprefix("#/").split("/"):
        found = found[part.replace("~1", "/").replace("~0", "~")]
    assert isinstance(found, dict)
    return found


def message(document: dict[str, Any], ref: str) -> dict[str, Any]:
    """The message a channel's message reference names, from components."""
    return resolve(document, resolve(document, ref)["$ref"])


def reply_of(document: dict[str, Any], operation: str) -> dict[str, Any]:
    reply: dict[str, Any] = document["operations"][operation]["reply"]
    return reply


def reply_messages(document: dict[str, Any], operation: str) -> dict[str, dict[str, Any]]:
    """The messages the operation's reply names, by their key in components."""
    found = {}
    for ref in reply_of(document, operation)["messages"]:
        target = resolve(document, ref["$ref"])["$ref"]
        found[target.rsplit("/", 1)[1]] = resolve(document, target)
    return found


def conforms(document: dict[str, Any], schema: dict[str, Any], value: Any) -> None:
    """``value`` fits ``schema``, whose references point into the document's components."""
    rooted = {**schema, "components": document.get("components", {})}
    jsonschema.Draft7Validator(rooted).validate(value)


# ---- the spec, a sentence a test -------------------------------------------------------------


def test_the_document_with_request_reply_validates_against_the_asyncapi_3_0_schema(
    document: dict[str, Any],
) -> None:
    valid(document)
    assert "reply" in document["operations"]["redis.bill"]


def test_a_subscriber_whose_handler_returns_a_value_describes_a_request_reply_operation(
    document: dict[str, Any],
) -> None:
    replying = {key for key, op in document["operations"].items() if "reply" in op}
    assert replying == {
        "redis.bill",
        "redis.quote",
        "redis.maybe_bill",
        "redis.check",
        "redis.label",
        "file_billing.ss_.replay",
    }
    assert all(document["operations"][key]["action"] == "receive" for key in replying)


@pytest.mark.parametrize(
    ("operation", "returns"),
    [
        ("redis.audit", "None"),
        ("redis.settle", "an Outcome"),
        ("redis.stop", "NoReturn"),
    ],
)
def test_a_handler_that_returns_none_noreturn_or_an_outcome_describes_no_reply(
    document: dict[str, Any], operation: str, returns: str
) -> None:
    receive = document["operations"][operation]
    assert "reply" not in receive, f"a handler returning {returns} answers no value"
    [ref] = receive["messages"]
    assert not ref["$ref"].endswith(".request")  # nor is its message a request


def test_the_reply_address_is_the_reply_to_header_of_the_request(
    document: dict[str, Any],
) -> None:
    address = reply_of(document, "redis.bill")["address"]
    assert address["location"] == REPLY_TO_LOCATION
    assert "caller's reply address" in address["description"]


def test_the_reply_message_has_the_payload_schema_of_the_return_annotation(
    document: dict[str, Any],
) -> None:
    schemas = document["components"]["schemas"]
    receipt = reply_messages(document, "redis.bill")["Receipt.reply"]
    assert receipt["payload"] == {"$ref": "#/components/schemas/Receipt"}  # msgspec's schema
    assert set(schemas["Receipt"]["required"]) == {"order", "paid"}
    assert receipt["contentType"] == "application/json"
    quote = reply_messages(document, "redis.quote")["Quote.reply"]  # pydantic's own schema
    assert set(quote["payload"]["properties"]) == {"order", "price"}
    label = reply_messages(document, "redis.label")["str.reply"]
    assert label["payload"] == {"type": "string"}
    assert label["contentType"] == "text/plain; charset=utf-8"  # a str is replied as its text
    raw = reply_messages(document, "file_billing.ss_.replay")["Bytes.reply"]
    assert raw["payload"] == {"type": "string", "format": "binary"}
    assert raw["contentType"] == "application/octet-stream"


def test_the_reply_lists_the_failure_reply_with_the_error_header_and_payload(
    document: dict[str, Any],
) -> None:
    failure = reply_messages(document, "redis.bill")[ERROR_REPLY]
    headers = failure["headers"]
    assert headers["required"] == [CORRELATION_HEADER, ERROR_HEADER]
    assert "dropped" in headers["properties"][ERROR_HEADER]["enum"]
    assert set(failure["payload"]["required"]) == {
        "handler",
        "type",
        "message",
        "reason",
        "attempts",
    }
    # One failure message, shared by every operation's reply.
    assert [k for k in document["components"]["messages"] if "error" in k] == [ERROR_REPLY]


def test_the_request_messages_headers_list_the_correlation_and_reply_to_headers_as_optional(
    document: dict[str, Any],
) -> None:
    [ref] = document["operations"]["redis.bill"]["messages"]
    request = message(document, ref["$ref"])
    assert request["name"] == "Order.request"
    assert request["payload"] == {"$ref": "#/components/schemas/Order"}
    headers = request["headers"]
    assert set(headers["properties"]) == {CORRELATION_HEADER, REPLY_TO_HEADER}
    assert "required" not in headers  # a message without them is handled, and answers nobody
    conforms(document, headers, {})
    conforms(document, headers, {CORRELATION_HEADER: "c1", REPLY_TO_HEADER: "r1"})


def test_both_messages_have_a_correlation_id_in_the_correlation_header(
    document: dict[str, Any],
) -> None:
    [ref] = document["operations"]["redis.bill"]["messages"]
    messages = [message(document, ref["$ref"]), *reply_messages(document, "redis.bill").values()]
    assert len(messages) == 3  # the request, the value replied, the failure replied
    for each in messages:
        assert each["correlationId"]["location"] == CORRELATION_LOCATION


# ---- what the specification says that its JSON Schema cannot check ---------------------------


def test_the_reply_channel_has_a_null_address_and_holds_the_replys_messages(
    document: dict[str, Any],
) -> None:
    """AsyncAPI 3.0, Operation Reply Object: with an ``address``, the ``channel``'s address
    MUST be null or absent; ``messages`` MUST be a subset of that channel's, and the channel
    one of the root channels."""
    for key, operation in document["operations"].items():
        reply = operation.get("reply")
        if reply is None:
            continue
        channel_ref = reply["channel"]["$ref"]
        assert channel_ref.startswith("#/channels/"), key
        channel = resolve(document, channel_ref)
        assert channel["address"] is None, key
        own = {f"{channel_ref}/messages/{name}" for name in channel["messages"]}
        assert {m["$ref"] for m in reply["messages"]} <= own, key
        server = document["operations"][key]["channel"]["$ref"]
        assert channel["servers"] == resolve(document, server)["servers"], key


def test_the_redis_servers_replies_are_published_and_the_files_have_no_binding(
    document: dict[str, Any],
) -> None:
    assert document["channels"]["redis.replies_2"]["bindings"]["redis"]["method"] == "publish"
    assert "bindings" not in document["channels"]["file_billing.ss_.replies"]


# ---- the nasty cases -------------------------------------------------------------------------


def test_a_stream_named_replies_keeps_its_channel_and_the_replies_take_another_key(
    document: dict[str, Any],
) -> None:
    channels = document["channels"]
    assert channels["redis.replies"]["address"] == "replies"  # the stream misnamed reads
    assert channels["redis.replies"]["bindings"]["redis"]["method"] == "xreadgroup"
    assert channels["redis.replies_2"]["address"] is None
    assert reply_of(document, "redis.bill")["channel"] == {"$ref": "#/channels/redis.replies_2"}


def test_a_return_that_admits_none_or_an_outcome_may_reply_null(
    document: dict[str, Any],
) -> None:
    for operation in ("redis.maybe_bill", "redis.check"):  # -> Receipt | None, | Outcome
        [value] = [m for k, m in reply_messages(document, operation).items() if k != ERROR_REPLY]
        payload = value["payload"]
        assert payload == {"anyOf": [{"$ref": "#/components/schemas/Receipt"}, {"type": "null"}]}
        conforms(document, payload, None)
        conforms(document, payload, {"order": 1, "paid": True})
    # bill's reply is never null: its schema says so.
    with pytest.raises(jsonschema.ValidationError):
        conforms(document, reply_messages(document, "redis.bill")["Receipt.reply"]["payload"], None)


def test_a_batch_handler_and_an_unannotated_one_describe_no_reply(
    document: dict[str, Any],
) -> None:
    assert "reply" not in document["operations"]["redis.batch"]  # replies null, per message
    assert "reply" not in document["operations"]["redis.untyped"]  # nothing known to say


def test_each_channel_of_a_source_of_several_streams_has_the_reply() -> None:
    document = asyncapi_document(memory_app())
    valid(document)
    eu, us = (
        document["operations"]["memory.regions"],
        document["operations"]["memory.memory.us.receive"],
    )
    assert eu["channel"] == {"$ref": "#/channels/memory.eu"}
    assert us["channel"] == {"$ref": "#/channels/memory.us"}
    assert eu["reply"] == us["reply"]
    assert eu["reply"]["channel"] == {"$ref": "#/channels/memory.replies"}


def test_a_document_shares_nothing_with_the_next() -> None:
    first = asyncapi_document(memory_app())
    first["components"]["messages"][ERROR_REPLY]["payload"]["required"].clear()
    first["components"]["messages"]["Order.request"]["headers"]["properties"].clear()
    second = asyncapi_document(memory_app())
    assert second["components"]["messages"][ERROR_REPLY]["payload"]["required"]
    assert second["components"]["messages"]["Order.request"]["headers"]["properties"]


def test_the_validation_can_fail_on_a_reply() -> None:
    broken = asyncapi_document(memory_app())
    broken["operations"]["memory.answer"]["reply"]["address"]["location"] = REPLY_TO_HEADER
    with pytest.raises(AssertionError, match=r"'memory.answer'\]: .* is not valid"):
        valid(broken)


# ---- the document says what the wire carries -------------------------------------------------


class Wire(Middleware):
    """Keeps each request and each reply as it is published: its payload and its headers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        self.replies: list[tuple[bytes, dict[str, str]]] = []

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        yield
        if call.is_reply:
            assert isinstance(call.message, bytes)  # a reply is encoded once, before
            self.replies.append((call.message, dict(call.headers)))
        elif REPLY_TO_HEADER in call.headers:
            self.requests.append(dict(call.headers))


async def test_a_live_request_and_its_replies_fit_the_documented_messages() -> None:
    wire = Wire()
    app = memory_app(wire)
    document = asyncapi_document(app)
    replies = reply_messages(document, "memory.answer")
    [request_ref] = document["operations"]["memory.answer"]["messages"]
    request = message(document, request_ref["$ref"])
    async with app.test() as t:
        await t.request("orders", Order(id=1, amount=2.5))
        with pytest.raises(RemoteError, match="order -1 is negative"):
            await t.request("orders", Order(id=-1, amount=0.0))
    assert len(wire.requests) == 2
    for headers in wire.requests:
        conforms(document, request["headers"], headers)
    (value, value_headers), (failure, failure_headers) = wire.replies
    conforms(document, replies["Receipt.reply"]["payload"], json.loads(value))
    conforms(document, replies["Receipt.reply"]["headers"], value_headers)
    conforms(document, replies[ERROR_REPLY]["payload"], json.loads(failure))
    conforms(document, replies[ERROR_REPLY]["headers"], failure_headers)
    # A value's reply is not a failure's: each fits its own message only.
    with pytest.raises(jsonschema.ValidationError):
        conforms(document, replies["Receipt.reply"]["headers"], failure_headers)
    with pytest.raises(jsonschema.ValidationError):
        conforms(document, replies[ERROR_REPLY]["headers"], value_headers)
