"""The campaign's consumer process: ``python -m tests.chaos.consumer KIND URL KEY CONSUMER LEDGER
SEED``.

``KIND`` picks the subscription: ``stream`` (a member of group ``g``), ``window`` (the same
with ``pipeline=True``), ``atomic`` (``pipeline=True, atomic=True``), ``reliable`` (a reliable
list), ``simple`` (a simple list), ``channel`` (Pub/Sub) or ``file`` (a durable consumer of a
stream file; ``URL`` is the file's path). ``CONSUMER`` names the group member, the reliable
list's consumer or the durable consumer, so a restart takes back what the killed process held.

Every handler run is written to the ledger at ``LEDGER`` (the kit's ``ledger_middleware``:
``run`` as it begins, ``settled`` once the transport settled it; the handler writes ``ended``
as it returns), so a run cut short by a kill is on record. A run takes a random moment (0-2
ms, seeded), so settles finish out of order and a kill lands inside runs. Under ``window`` and
``atomic`` the handler queues ``HINCRBY <KEY>:effects <n> 1`` on its segment: the hash counts
how many times each message's side effect was applied.

It prints ``ready`` once started; SIGTERM stops it gracefully,
SIGKILL is a crash.
"""

from __future__ import annotations

import random
import sys

import trio

from trio_streams import App, Context, Position
from trio_streams.core.delivery import Delivery
from trio_streams.core.transport import Source
from trio_streams.file import FileBroker, FilePosition, FileStream
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream
from trio_streams.testing.faults import Ledger, ledger_middleware

SPAN = 10_000_000
KINDS = ("stream", "window", "atomic", "reliable", "simple", "channel", "file")


def message_id(payload: bytes) -> int:
    """The number of a stream file's payload ``<writer>:<n>`` (``tests.file.many_writers``):
    ``writer * 10_000_000 + n``."""
    writer, _, rest = payload.partition(b":")
    return int(writer) * SPAN + int(rest.partition(b":")[0])


def redis_id(delivery: Delivery) -> int:
    return int(delivery.payload)


def file_id(delivery: Delivery) -> int:
    return message_id(delivery.payload)


def effects_key(key: str) -> str:
    """The hash the windowed handlers increment, in the stream's hash slot."""
    return f"{key}:effects"


def build(kind: str, url: str, key: str, consumer: str, ledger_path: str, seed: int) -> App:
    if kind not in KINDS:
        raise SystemExit(f"KIND is one of {', '.join(KINDS)}, not {kind!r}")
    ledger = Ledger(ledger_path)
    id_of = file_id if kind == "file" else redis_id
    app = App("chaos", middlewares=[ledger_middleware(ledger, id_of=id_of)])
    rng = random.Random(seed)
    source: Source
    broker: FileBroker | RedisBroker
    options: dict[str, object] = {"workers": 4}
    if kind == "file":
        broker = app.broker(FileBroker(url, existing_only=True, durable_interval=0.05))
        source = FileStream(key, durable=consumer, start_at=FilePosition.beginning())
    else:
        broker = app.broker(
            RedisBroker(f"{url}?backoff_initial=0.01&backoff_cap=0.2&command_timeout=2")
        )
        options.update(block=50, count=20)
        if kind in ("stream", "window", "atomic"):
            source = RedisStream(
                key, group="g", consumer=consumer, start=Position.beginning(), min_idle=1.0
            )
            if kind != "stream":
                options.update(pipeline=True, atomic=kind == "atomic")
        elif kind == "reliable":
            source = RedisList(key, reliable=True, consumer=consumer, heartbeat=0.5, reap_every=0.2)
        elif kind == "simple":
            source = RedisList(key)
        else:
            source = RedisChannel(key)
            options.pop("count")
            options.pop("block")

    windowed = kind in ("window", "atomic")

    @broker.subscriber(source, name="chaos", **options)  # type: ignore[arg-type]
    async def handle(payload: bytes, ctx: Context) -> None:
        await trio.sleep(rng.random() * 0.002)
        if windowed:
            ctx.pipeline.hincrby(effects_key(key), int(payload), 1)

    @app.after_startup
    async def ready() -> None:
        print("ready", flush=True)

    return app


if __name__ == "__main__":
    kind, url, key, consumer, ledger_path, seed = sys.argv[1:7]
    build(kind, url, key, consumer, ledger_path, int(seed)).run()
