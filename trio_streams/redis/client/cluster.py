"""The cluster client: route each command to the primary that serves its keys' slot.

The slot map comes from the server (``CLUSTER SHARDS``, or ``CLUSTER SLOTS`` before 7.0) and is
refreshed when a ``MOVED`` reply says it is stale or a node was lost. ``ASK`` (a slot half way
through a migration) is followed once with ``ASKING`` and leaves the map alone. A command or
transaction whose keys hash to different slots is refused before anything is sent; hash tags
(``{order:1}:items``, ``{order:1}:total``) put related keys in one slot.

Pipelines are split per node and sent concurrently, one write per node; replies are put back in
the caller's order. A command redirected inside a pipeline is sent again on its own to the node
named by the redirect (the redirect proves it did not run); such a command runs after the rest
of its node's batch.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from ...core.errors import ConfigurationError
from .backoff import Backoff
from .capabilities import ServerCommands, read_commands
from .client import RedisClient
from .commands import check_command
from .config import ClientConfig
from .connection import Connection, open_connection
from .errors import (
    Address,
    AskError,
    ClusterError,
    ClusterRedirect,
    ConnectionSetupError,
    CrossSlotError,
    ExecAbortError,
    MovedError,
    RedisConnectionError,
    RedisError,
    ReplyError,
    describe_command,
    format_address,
)
from .keys import SLOTS, KeyFinder, key_slot
from .keys import text as _text
from .negotiation import ProtocolWatch
from .pipeline import Item, TransactionBlock, fold_replies, wire_commands
from .pool import ConnectionPool
from .protocol import Arg, Command
from .replies import Replies
from .subscriber import Gap, Subscription

#: Redirects followed for one command before giving up (a map in flux settles in a few).
MAX_REDIRECTS = 5


def _as_dict(value: Any) -> dict[str, Any]:
    """A RESP3 map, or a RESP2 flat ``[key, value, ...]`` list, as a dict with str keys."""
    if isinstance(value, dict):
        return {_text(k): v for k, v in value.items()}
    return {_text(value[i]): value[i + 1] for i in range(0, len(value) - 1, 2)}


def parse_cluster_shards(reply: Sequence[Any], *, tls: bool) -> list[tuple[int, int, Address]]:
    """``(first slot, last slot, primary address)`` ranges from a ``CLUSTER SHARDS`` reply."""
    ranges: list[tuple[int, int, Address]] = []
    for shard in reply:
        fields = _as_dict(shard)
        primary = None
        for node in fields.get("nodes", []):
            info = _as_dict(node)
            if (
                _text(info.get("role", b"")) == "master"
                and _text(info.get("health", b"online")) != "fail"
            ):
                primary = info
                break
        if primary is None:
            continue
        host = _text(primary.get("endpoint") or primary.get("ip") or b"")
        if host in ("", "?"):
            host = _text(primary.get("ip", b"127.0.0.1"))
        port = primary["tls-port"] if tls and "tls-port" in primary else primary["port"]
        slots = [int(s) for s in fields.get("slots", [])]
        for i in range(0, len(slots) - 1, 2):
            ranges.append((slots[i], slots[i + 1], (host, int(port))))
    return ranges


def parse_cluster_slots(reply: Sequence[Any]) -> list[tuple[int, int, Address]]:
    """The same ranges from a ``CLUSTER SLOTS`` reply (servers before 7.0)."""
    ranges = []
    for entry in reply:
        host = _text(entry[2][0]) or "127.0.0.1"
        ranges.append((int(entry[0]), int(entry[1]), (host, int(entry[2][1]))))
    return ranges


class RedisCluster(RedisClient):
    """A client of a Redis Cluster, from one or more seed nodes."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._protocols = ProtocolWatch(config.connection.protocol)
        self._slots: list[Address | None] = [None] * SLOTS
        self._primaries: list[Address] = []
        self._pools: dict[Address, ConnectionPool] = {}
        self._known: list[Address] = list(config.addresses)
        self._keys: KeyFinder | None = None
        self._commands_stale = False
        self._label = "cluster " + ", ".join(format_address(a) for a in config.addresses)
        self._refresh_lock = trio.Lock()
        self._epoch = 0
        self._stale = True
        #: Paces the map refreshes after a slot was found with no owner (a primary flagged
        #: FAIL and not yet replaced): a retry loop waits, instead of spinning.
        self._unowned = Backoff(config.backoff_initial, config.backoff_cap)
        self._closed = False

    def __repr__(self) -> str:
        return f"<RedisCluster nodes={[format_address(a) for a in self.primaries]}>"

    # -- slot map ---------------------------------------------------------------------------

    @property
    def primaries(self) -> list[Address]:
        """The primaries that serve at least one slot, as last seen."""
        return list(self._primaries)

    def node_for_slot(self, slot: int) -> Address | None:
        """The primary serving ``slot`` in the current map."""
        return self._slots[slot]

    async def refresh_slots(self) -> None:
        """Read the slot map (and, the first time, the command table) from a known node."""
        await self._refresh(self._epoch)

    async def _refresh(self, seen_epoch: int) -> None:
        async with self._refresh_lock:
            if self._epoch > seen_epoch:
                return  # another task refreshed since this one saw the stale map
            failures: list[str] = []
            candidates = list(dict.fromkeys([*self.primaries, *self._known]))
            random.shuffle(candidates)
            for address in candidates:
                try:
                    await self._load_map(address)
                except ConnectionSetupError:
                    raise  # the configuration is wrong (credentials...): the same on every node
                except (RedisConnectionError, ReplyError, ClusterError) as exc:
                    failures.append(f"{format_address(address)}: {exc}")
                    continue
                self._epoch += 1
                self._stale = False
                return
            raise ClusterError(
                f"could not read the cluster slot map from any node ({'; '.join(failures)})"
            )

    async def _load_map(self, address: Address) -> None:
        async with self._pool(address).connection() as connection:
            try:
                reply = await connection.execute("CLUSTER", "SHARDS")
                ranges = parse_cluster_shards(
                    reply, tls=self.config.connection.ssl_context is not None
                )
            except ReplyError as exc:
                if "unknown" not in exc.message.lower():
                    raise
                ranges = parse_cluster_slots(await connection.execute("CLUSTER", "SLOTS"))
            if self._commands is None or self._commands_stale:
                # Once per client, and again after a node was lost (it may come back as
                # another build): the key positions and options of this cluster's commands.
                self._commands = await read_commands(connection, source=self._label)
                self._commands_stale = False
                self._keys = self._commands.finder
        if not ranges:
            raise ClusterError(f"node {format_address(address)} reports no slot ranges")
        slots: list[Address | None] = [None] * SLOTS
        for first, last, node in ranges:
            slots[first : last + 1] = [node] * (last - first + 1)
        self._slots = slots
        self._primaries = list(dict.fromkeys(a for a in slots if a is not None))
        for node in self._primaries:
            if node not in self._known:
                self._known.append(node)
        for gone in set(self._pools) - set(self.primaries) - set(self.config.addresses):
            await self._pools.pop(gone).aclose()

    def _pool(self, address: Address) -> ConnectionPool:
        pool = self._pools.get(address)
        if pool is None:
            if self._closed:
                raise RedisConnectionError("the client is closed", address=address)
            options = self.config.connection

            async def opener() -> Connection:
                return self._protocols.seen(await open_connection(address, options))

            pool = self._pools[address] = ConnectionPool(
                opener,
                label=f"redis {format_address(address)}",
                max_size=self.config.pool_size,
                timeout=self.config.pool_timeout,
                backoff=Backoff(self.config.backoff_initial, self.config.backoff_cap),
            )
        return pool

    def _node_lost(self, address: Address) -> None:
        self._stale = True
        self._commands_stale = True
        pool = self._pools.get(address)
        if pool is not None:
            pool.discard_idle()

    async def _ready(self) -> KeyFinder:
        if self._stale or self._keys is None:
            if self._unowned.failures:
                await trio.sleep(self._unowned.failed())  # a slot had no owner: wait first
            await self._refresh(self._epoch)
        assert self._keys is not None
        return self._keys

    # -- routing ----------------------------------------------------------------------------

    async def slot_of(self, args: Command) -> int | None:
        """The one slot every key of ``args`` hashes to; None for a keyless command.

        Raises :class:`CrossSlotError` when the keys span slots.
        """
        finder = await self._ready()
        keys = finder.keys(args)
        if keys is None:
            keys = await self._server_keys(args)
        return self._common_slot(keys, [args])

    async def _read_commands(self) -> ServerCommands:
        await self._ready()  # the slot map's first load reads the table
        assert self._commands is not None
        return self._commands

    async def _server_keys(self, args: Command) -> list[Arg]:
        reply = await self.execute_on(self._any_node(), "COMMAND", "GETKEYS", *args)
        return list(reply)

    @staticmethod
    def _common_slot(keys: Iterable[Arg], commands: Sequence[Command]) -> int | None:
        slots = {key_slot(k) for k in keys}
        if len(slots) > 1:
            what = (
                f"command {describe_command(commands[0])}"
                if len(commands) == 1
                else f"transaction of {len(commands)} commands"
            )
            raise CrossSlotError(
                f"{what} names keys in different cluster slots {sorted(slots)}: "
                "use a hash tag ({...}) so related keys share a slot"
            )
        return slots.pop() if slots else None

    def _any_node(self) -> Address:
        return self._primaries[0] if self._primaries else self._known[0]

    def _node(self, slot: int | None) -> Address:
        if slot is None:
            return self._any_node()
        address = self._slots[slot]
        if address is None:
            # Read the map again before the next command (paced: see ``_ready``): the slot
            # gets an owner once the node is back or a replica took over.
            self._stale = True
            self._unowned.failures += 1
            raise ClusterError(f"no node serves slot {slot} in the current slot map")
        if self._unowned.failures:
            self._unowned.succeeded()
        return address

    # -- commands ---------------------------------------------------------------------------

    async def execute(self, *args: Any) -> Any:
        check_command(args)
        slot = await self.slot_of(args)
        address = self._node(slot)
        asking = False
        for _ in range(MAX_REDIRECTS):
            try:
                return await self._execute_at(address, args, asking=asking)
            except MovedError as exc:
                epoch = self._epoch
                self._slots[exc.slot] = exc.target
                address, asking = exc.target, False
                await self._refresh(epoch)
            except AskError as exc:
                address, asking = exc.target, True
        raise ClusterError(
            f"command {describe_command(args)} was redirected {MAX_REDIRECTS} times; "
            "the cluster's slot map is not settling"
        )

    async def execute_on(self, address: Address, *args: Any) -> Any:
        """Run a command on one node (e.g. ``INFO`` or ``FLUSHALL`` on each of
        :attr:`primaries`), without routing or redirects."""
        return await self._execute_at(address, args, asking=False)

    async def _execute_at(self, address: Address, args: Command, *, asking: bool) -> Any:
        pool = self._pool(address)
        try:
            connection = await pool.acquire()
        except RedisConnectionError:
            self._node_lost(address)
            raise
        try:
            if not asking:
                return await connection.execute_command(args)
            asked = await connection.execute_many([("ASKING",), args])
            if isinstance(asked[1], ReplyError):
                raise asked[1]
            return asked[1]
        except RedisConnectionError:
            self._node_lost(address)
            raise
        finally:
            pool.release(connection)

    async def _item_slot(self, item: Item) -> int | None:
        """The slot of a command or of a whole MULTI/EXEC block (CrossSlotError if split)."""
        if type(item) is not TransactionBlock:
            return await self.slot_of(item)  # type: ignore[arg-type]
        finder = await self._ready()
        keys: list[Arg] = []
        for command in item.commands:
            found = finder.keys(command)
            keys.extend(found if found is not None else await self._server_keys(command))
        return self._common_slot(keys, item.commands)

    async def _run_pipeline(self, items: Sequence[Item]) -> Replies:
        if not items:
            return Replies()
        # Every slot is known (and every cross-slot item refused) before anything is sent.
        slots = [await self._item_slot(item) for item in items]
        groups: dict[Address, list[int]] = {}
        for index, slot in enumerate(slots):
            groups.setdefault(self._node(slot), []).append(index)
        results: list[Any] = [None] * len(items)
        lost: list[RedisConnectionError] = []

        async def run_group(address: Address, indexes: list[int]) -> None:
            group = [items[i] for i in indexes]
            pool = self._pool(address)
            try:
                async with pool.connection() as connection:
                    replies = await connection.execute_many(wire_commands(group))
            except RedisConnectionError as exc:
                self._node_lost(address)
                lost.append(exc)
                for i in indexes:
                    results[i] = exc
                return
            for i, reply in zip(indexes, fold_replies(group, replies, address), strict=True):
                results[i] = reply

        if len(groups) == 1:
            ((address, indexes),) = groups.items()
            await run_group(address, indexes)
        else:
            async with trio.open_nursery() as nursery:
                for address, indexes in groups.items():
                    nursery.start_soon(run_group, address, indexes)
        if lost:
            # Other nodes' replies are attached; which of the lost node's commands ran is unknown.
            lost[0].partial_replies = Replies(results)
            raise lost[0]
        for index, reply in enumerate(results):
            item = items[index]
            if isinstance(reply, ClusterRedirect):
                # The redirect proves the command did not run: send it to the named node.
                try:
                    results[index] = await self.execute(*item)  # type: ignore[misc]
                except ReplyError as exc:
                    results[index] = exc
            elif isinstance(reply, ExecAbortError) and isinstance(item, TransactionBlock):
                moved = next((e for e in reply.errors if isinstance(e, MovedError)), None)
                if moved is not None:
                    results[index] = await self._resend_block(item, slots[index], moved)
        return Replies(results)

    async def _resend_block(
        self, block: TransactionBlock, slot: int | None, moved: MovedError
    ) -> Any:
        """Send a block the server aborted because its slot moved (so nothing of it ran)
        to the slot's new owner; its result, or the error that stopped it, in place."""
        for _ in range(MAX_REDIRECTS):
            epoch = self._epoch
            self._slots[moved.slot] = moved.target
            await self._refresh(epoch)
            address = self._node(slot)
            try:
                async with self._pool(address).connection() as connection:
                    replies = await connection.execute_many(wire_commands([block]))
            except RedisConnectionError:
                self._node_lost(address)
                raise
            (result,) = fold_replies([block], replies, address)
            if not isinstance(result, ExecAbortError):
                return result
            again = next((e for e in result.errors if isinstance(e, MovedError)), None)
            if again is None:
                return result
            moved = again
        return ClusterError(f"transaction on slot {slot} kept being redirected")

    # -- connections ------------------------------------------------------------------------

    async def _address_for_key(self, key: Arg | None) -> Address:
        await self._ready()
        return self._node(None if key is None else key_slot(key))

    @asynccontextmanager
    async def connection(self, key: Arg | None = None) -> AsyncIterator[Connection]:
        address = await self._address_for_key(key)
        async with self._pool(address).connection() as connection:
            try:
                yield connection
            except RedisConnectionError:
                self._node_lost(address)
                raise

    @asynccontextmanager
    async def dedicated_connection(self, key: Arg | None = None) -> AsyncIterator[Connection]:
        address = await self._address_for_key(key)
        try:
            connection = await self._pool(address).open_unpooled()
        except RedisConnectionError:
            self._node_lost(address)
            raise
        try:
            yield connection
        except RedisConnectionError:
            self._node_lost(address)
            raise
        finally:
            connection.close()

    def subscribe(
        self,
        channels: Iterable[str | bytes] = (),
        *,
        patterns: Iterable[str | bytes] = (),
        shard_channels: Iterable[str | bytes] = (),
        on_lost: Callable[[RedisError], None] | None = None,
        on_resumed: Callable[[Gap], None] | None = None,
    ) -> Subscription:
        shard = list(shard_channels)
        if shard and (channels or patterns):
            raise ConfigurationError(
                "in a cluster, subscribe to shard channels and to classic channels/patterns "
                "with separate subscriptions (they live on different nodes)"
            )
        shard_slots = {key_slot(c) for c in shard}

        async def opener() -> Connection:
            await self._ready()
            nodes = {self._node(s) for s in shard_slots} or {self._any_node()}
            if len(nodes) > 1:
                raise CrossSlotError(
                    f"shard channels {shard!r} live on different nodes "
                    f"{sorted(format_address(n) for n in nodes)}: use one subscription per node"
                )
            return await self._pool(nodes.pop()).open_unpooled()

        def lost() -> None:
            self._stale = True

        return Subscription(
            opener,
            channels=channels,
            patterns=patterns,
            shard_channels=shard,
            backoff=Backoff(self.config.backoff_initial, self.config.backoff_cap),
            on_connection_lost=lost,
            on_lost=on_lost,
            on_resumed=on_resumed,
            health_check_interval=self.config.health_check_interval,
            health_check_timeout=self.config.health_check_timeout,
        )

    async def aclose(self) -> None:
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.aclose()
