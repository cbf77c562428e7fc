"""The Lua script a consumer-group member settles a copy with: write it, then acknowledge.

A retry (the copy ``XADD``ed back onto the stream) and a dead letter (the copy ``XADD``ed onto
the dead-letter stream) must never acknowledge the original unless the copy was written.
``MULTI``/``EXEC`` cannot promise that: Redis runs every queued command, so an ``XADD`` that
fails inside ``EXEC`` (a dead-letter key that holds a list) is followed by an ``XACK`` that
succeeds, and the entry is gone. A script stops at the first error: the ``XACK`` after a failed
``XADD`` never runs, and the entry stays pending, to be delivered again.
"""

from __future__ import annotations

from .client.scripts import Script

__all__ = ["COPY_THEN_ACK"]

#: KEYS: where the copy goes, the stream read. ARGV: group, entry id, then the copy's fields.
#: Returns what XACK acknowledged.
COPY_THEN_ACK = Script(
    """
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
""",
    purpose="copy an entry to a stream, then acknowledge it",
)
