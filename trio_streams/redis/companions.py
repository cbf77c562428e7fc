"""Companion keys: keys derived from a subscription's key that must share its cluster slot.

A subscription's scripts touch its key and the keys derived from it in one step: a stream's
``retry_after`` schedules the copy in its delay set and acknowledges the original, a reliable
list moves entries into its processing list, its reaper reads a heartbeat and moves a list. In
a cluster a script runs only if every key it names hashes to one slot, so every derived key
must hash to the slot of the key it is derived from. :func:`companion_key` is the one function
that derives them (delay sets of streams and lists; a reliable list's processing lists,
heartbeats and consumer set): **any new derived key must come from it**, so that it lands in
the slot whatever the user named the stream.

**The rule it follows** is the server's (:func:`~.client.keys.key_slot`): a key's slot is the
CRC16 of its hash tag — what lies between its first ``{`` and the first ``}`` after that, if
that is not empty — or else of the whole key. ``companion_key(key, suffix)`` is, in the first
form that applies:

1. ``key`` has a hash tag: ``key:suffix``. Its first ``{`` and the first ``}`` after it are
   both inside ``key``, so what follows cannot move them: the tag, and so the slot, is the
   key's.
2. ``key`` has no hash tag, is not empty and holds no ``}``: ``{key}:suffix``. The first ``{``
   is the one put in front; ``key`` holds no ``}``, so the first after it is the one put after
   ``key``. The tag is ``key`` itself, not empty: its CRC16 is the slot of ``key``, which has
   no tag.
3. Otherwise (``a}b``, ``x{}y``, ``{}``, ``}{``, the empty key): no tag can spell ``key``, since
   a tag never holds a ``}`` and is never empty. The companion takes a tag of its own,
   :func:`slot_tag` — the shortest string of letters and digits (the first in a fixed order)
   that hashes to the slot of ``key`` — followed by ``key``: ``{T}key:suffix``. ``T`` holds no
   braces, so the first ``{`` is the one in front and the first ``}`` the one that closes ``T``.

In each form the suffix comes after the tag has closed, so it may hold anything (a consumer
name with braces). ``tests/redis/test_companions.py`` checks the property for arbitrary keys
and suffixes, and the server's ``CLUSTER KEYSLOT`` for a sample.

The first two forms are the names trio-streams has always used (``{orders}:delayed``,
``{eu}.orders:delayed``), so a stream's existing schedule is found after an upgrade. Distinct
keys get distinct companions, except a key that is spelt as the wrapped form of another:
``orders`` and ``{orders}`` (or ``a}b`` and ``{T}a}b``) share theirs; do not use both.
"""

from __future__ import annotations

import binascii
import functools
import itertools
import string

from .client.keys import SLOTS, key_slot

__all__ = ["companion_key", "has_hash_tag", "slot_tag"]

#: What :func:`slot_tag` builds tags from, in the order it tries them.
_TAG_CHARACTERS = string.ascii_letters + string.digits


def has_hash_tag(key: str) -> bool:
    """Whether ``key`` has a hash tag: a ``{``, then a ``}`` after it, something between."""
    start = key.find("{")
    if start < 0:
        return False
    end = key.find("}", start + 1)
    return end > start + 1


def companion_key(key: str, suffix: str) -> str:
    """The key named ``suffix`` beside ``key``, in ``key``'s cluster slot whatever ``key`` is
    (see the module docstring for the rule and why it holds): ``{orders}:delayed`` for
    ``orders``, ``{eu}.orders:delayed`` for ``{eu}.orders``, ``{T}a}b:delayed`` for ``a}b``.

    Pure and synchronous; the third form's first use builds the table of tags (0.1 s)."""
    if has_hash_tag(key):
        return f"{key}:{suffix}"
    if key and "}" not in key:
        return f"{{{key}}}:{suffix}"
    return f"{{{slot_tag(key_slot(key))}}}{key}:{suffix}"


def slot_tag(slot: int) -> str:
    """The shortest string of ASCII letters and digits that hashes to ``slot`` (the first in
    the order of :data:`_TAG_CHARACTERS`): a hash tag that puts a key in that slot. Every slot
    has one of at most three characters; the table of all of them is built at the first call
    (about a tenth of a second), then each is a lookup."""
    if not 0 <= slot < SLOTS:
        raise ValueError(f"a cluster slot is in [0, {SLOTS}), not {slot!r}")
    return _slot_tags()[slot]


@functools.cache
def _slot_tags() -> tuple[str, ...]:
    found: dict[int, str] = {}
    for length in (1, 2, 3):
        for chars in itertools.product(_TAG_CHARACTERS, repeat=length):
            tag = "".join(chars)
            found.setdefault(binascii.crc_hqx(tag.encode(), 0) % SLOTS, tag)
    if len(found) != SLOTS:  # pragma: no cover - CRC16 is fixed: every slot is reached
        raise AssertionError(f"{SLOTS - len(found)} slots have no tag of three characters")
    return tuple(found[slot] for slot in range(SLOTS))
