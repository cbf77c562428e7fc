"""``companion_key``: a key derived from another lands in its cluster slot, whatever the key.

Checked against the slot function for arbitrary strings, and against ``CLUSTER KEYSLOT`` on a
real cluster node for a sample (the slot function is the server's rule only if the server
agrees)."""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.redis_servers import RedisClusterServers
from trio_streams.redis.client import key_slot
from trio_streams.redis.companions import companion_key, slot_tag
from trio_streams.redis.delays import delay_key
from trio_streams.redis.lists import consumers_key, heartbeat_key, processing_key

#: Keys whose braces do not make a hash tag, or make one only by accident of wrapping.
AWKWARD = ["a}b", "x{}y", "{}", "}{", "{a}b{c}", "", "}", "{", "{{}}", "x{y", "a}{b}", "{}a}"]

#: Text the way a key may be written, braces made frequent.
keys = st.text(alphabet=st.sampled_from("{}ab:") | st.characters(codec="utf-8"), max_size=12)


@settings(deadline=None)  # the first key that needs a tag builds the table of them
@given(key=keys, suffix=keys)
@example(key="a}b", suffix="delayed")
@example(key="{a}b}", suffix="delayed")
@example(key="", suffix="x")
def test_a_companion_hashes_to_the_slot_of_its_key_for_any_key_and_suffix(
    key: str, suffix: str
) -> None:
    assert key_slot(companion_key(key, suffix)) == key_slot(key)


@settings(deadline=None)
@given(first=keys, second=keys, suffix=keys)
@example(first="orders", second="{orders}", suffix="delayed")
def test_two_keys_share_a_companion_only_when_one_is_the_other_with_a_tag_put_in_front(
    first: str, second: str, suffix: str
) -> None:
    if first == second or companion_key(first, suffix) != companion_key(second, suffix):
        return
    # ``orders`` and ``{orders}``: a key already written in the wrapped form of another.
    wrapped = {companion_key(k, suffix).removesuffix(f":{suffix}") for k in (first, second)}
    assert wrapped & {first, second}, (first, second)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("orders", "{orders}:delayed"),  # the names in use stay as they were
        ("{eu}.orders", "{eu}.orders:delayed"),
        ("x{y", "{x{y}:delayed"),
        ("a{b}c", "a{b}c:delayed"),
        ("{a}b{c}", "{a}b{c}:delayed"),
    ],
)
def test_keys_that_can_be_wrapped_keep_their_names(key: str, expected: str) -> None:
    assert companion_key(key, "delayed") == expected


@pytest.mark.parametrize("key", ["a}b", "x{}y", "{}", "}{", ""])
def test_a_key_no_tag_can_hold_takes_the_shortest_tag_of_its_slot_then_the_key(key: str) -> None:
    tag = slot_tag(key_slot(key))
    assert companion_key(key, "delayed") == f"{{{tag}}}{key}:delayed"
    assert 1 <= len(tag) <= 3 and set(tag) <= set(string.ascii_letters + string.digits)


def test_every_slot_has_a_tag_of_at_most_three_letters_or_digits() -> None:
    for slot in range(16384):
        tag = slot_tag(slot)
        assert key_slot(tag) == slot and len(tag) <= 3


def test_every_derived_key_of_streams_and_lists_is_a_companion() -> None:
    for key in AWKWARD:
        assert delay_key(key) == companion_key(key, "delayed")
        assert processing_key(key, "{c}") == companion_key(key, "processing:{c}")
        assert heartbeat_key(key, "{c}") == companion_key(key, "heartbeat:{c}")
        assert consumers_key(key) == companion_key(key, "consumers")


@settings(max_examples=60, deadline=None)
@given(key=keys, suffix=keys)
def test_the_server_puts_a_companion_in_the_slot_of_its_key(
    redis_cluster: RedisClusterServers, key: str, suffix: str
) -> None:
    node = redis_cluster.primaries[0]
    slot = node.command("CLUSTER", "KEYSLOT", key.encode())
    assert node.command("CLUSTER", "KEYSLOT", companion_key(key, suffix).encode()) == slot
    assert key_slot(key) == slot


@pytest.mark.parametrize("key", AWKWARD)
def test_the_server_puts_the_companions_of_awkward_keys_in_their_slots(
    redis_cluster: RedisClusterServers, key: str
) -> None:
    node = redis_cluster.primaries[0]
    slot = node.command("CLUSTER", "KEYSLOT", key.encode())
    for suffix in ("delayed", "processing:{c}", "heartbeat:}{", "consumers"):
        companion = companion_key(key, suffix)
        assert node.command("CLUSTER", "KEYSLOT", companion.encode()) == slot, companion
