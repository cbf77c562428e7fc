"""Real ``redis-server`` processes for tests and benchmarks: standalone, TLS, cluster, sentinel.

The standalone server is the package's :class:`trio_streams.testing.servers.RedisServer`
(re-exported here); the cluster and sentinel sets are built from it.

Every server listens on a free loopback port, keeps nothing on disk (``--save "" --appendonly
no``, files in a temporary directory) and logs to a pipe that a watcher thread reads, so tests
wait for what a server *says* ("Ready to accept connections", "Cluster state changed: ok",
"+switch-master") with a timeout instead of sleeping. Servers can be stopped, killed (SIGKILL)
and restarted on the same port inside a test.

Only Debian's ``redis-server`` package is needed: sentinels run as ``redis-server --sentinel``.
When the binary is missing, :func:`redis_binary` fails with instructions; nothing is skipped.
``TRIO_STREAMS_REDIS_SERVER`` runs every server of these sets on another build, Redis or
Valkey (``nox -s redis-matrix``; :mod:`tests.server_matrix` installs the named ones).
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Self

from trio_streams.testing.servers import (
    REPLICA_SYNCED,
    START_TIMEOUT,
    Address,
    LogWatcher,
    RedisServer,
    ServerLaunchError,
    TlsFiles,
    command,
    free_port,
    poll_until,
    redis_binary,
    server_build,
)

__all__ = [
    "ACL_PASSWORD",
    "ACL_RULES",
    "ACL_USER",
    "ADMIN_PASSWORD",
    "START_TIMEOUT",
    "Address",
    "LogWatcher",
    "RedisClusterServers",
    "RedisSentinelServers",
    "RedisServer",
    "ServerLaunchError",
    "TlsFiles",
    "command",
    "free_port",
    "poll_until",
    "redis_binary",
    "redis_server",
    "redis_version",
    "server_build",
]

#: An ACL user that may read and write keys under ``app:`` and run nothing dangerous.
ACL_USER = "app"
ACL_PASSWORD = "app-secret"
ACL_RULES = (ACL_USER, "on", f">{ACL_PASSWORD}", "~app:*", "&*", "+@all", "-@dangerous")
#: The default user's password on a server started with ``--requirepass``.
ADMIN_PASSWORD = "admin-secret"


class _Group:
    """A set of servers sharing one temporary directory, stopped together."""

    def __init__(self, directory: Path | None = None) -> None:
        self._tmp = None if directory else tempfile.TemporaryDirectory(prefix="trio-streams-redis-")
        self.directory = directory or Path(self._tmp.name)  # type: ignore[union-attr]
        self.servers: list[RedisServer] = []

    def add(self, server: RedisServer) -> RedisServer:
        self.servers.append(server)
        return server

    def start(self) -> Self:
        """Start every server of the group and wait until the group is ready."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for server in reversed(self.servers):
            with contextlib.suppress(OSError):
                server.kill()
        if self._tmp is not None:
            self._tmp.cleanup()


@contextlib.contextmanager
def redis_server(
    *extra_args: str, tls: bool = False, tls_auth_clients: str = "optional"
) -> Iterator[RedisServer]:
    """A running standalone server (TLS with generated certificates if ``tls``)."""
    group = _Group()
    try:
        files = TlsFiles.generate(group.directory) if tls else None
        server = group.add(
            RedisServer(
                group.directory, extra_args=extra_args, tls=files, tls_auth_clients=tls_auth_clients
            )
        )
        yield server.start()
    finally:
        group.stop()


class RedisClusterServers(_Group):
    """A cluster of ``primaries`` primaries (and ``replicas`` replicas per primary)."""

    def __init__(self, *, primaries: int = 3, replicas: int = 0) -> None:
        super().__init__()
        self.primaries: list[RedisServer] = []
        self.replicas: list[RedisServer] = []
        self._primary_count = primaries
        self._replica_count = replicas

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{s.host}:{s.port}" for s in self.primaries)

    def _node(self, role: str) -> RedisServer:
        port = free_port(bus_offset=10000)
        return self.add(
            RedisServer(
                self.directory,
                port=port,
                name=f"cluster {role}",
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    f"nodes-{port}.conf",
                    "--cluster-node-timeout",
                    "2000",
                ],
            )
        )

    def start(self) -> Self:
        self.primaries = [self._node("primary") for _ in range(self._primary_count)]
        self.replicas = [
            self._node("replica") for _ in range(self._primary_count * self._replica_count)
        ]
        marks = {}
        for server in self.servers:
            server.start()
            marks[server.port] = server.log_mark()
        per = 16384 // len(self.primaries)
        for index, server in enumerate(self.primaries):
            last = 16383 if index == len(self.primaries) - 1 else (index + 1) * per - 1
            server.command("CLUSTER", "ADDSLOTSRANGE", index * per, last)
        first = self.primaries[0]
        for server in self.servers[1:]:
            first.command("CLUSTER", "MEET", server.host, server.port)
        for server in self.servers:
            server.wait_for_log("Cluster state changed: ok", since=marks[server.port])
        for index, replica in enumerate(self.replicas):
            primary = self.primaries[index // self._replica_count]
            node_id = primary.command("CLUSTER", "MYID").decode()
            mark = replica.log_mark()
            self._replicate(replica, node_id)
            replica.wait_for_log(REPLICA_SYNCED, since=mark)
        return self

    @staticmethod
    def _replicate(replica: RedisServer, node_id: str) -> None:
        # The replica may not have heard of the primary yet through gossip; it says so.
        mark = replica.log_mark()
        try:
            replica.command("CLUSTER", "REPLICATE", node_id)
        except ServerLaunchError:
            replica.wait_for_log(node_id[:8], since=mark)  # gossip introduced it
            replica.command("CLUSTER", "REPLICATE", node_id)

    def node_for_slot(self, slot: int) -> RedisServer:
        for server in self.primaries:
            for entry in server.command("CLUSTER", "SLOTS"):
                if entry[0] <= slot <= entry[1] and entry[2][1] == server.port:
                    return server
        raise ServerLaunchError(f"no primary serves slot {slot}")

    def move_slot(self, slot: int, target: RedisServer) -> None:
        """Migrate ``slot`` (and its keys) to ``target``, announcing it to every node."""
        source = self.node_for_slot(slot)
        if source is target:
            return
        target_id = target.command("CLUSTER", "MYID")
        source_id = source.command("CLUSTER", "MYID")
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := source.command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            source.command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        for server in self.primaries:
            server.command("CLUSTER", "SETSLOT", slot, "NODE", target_id)


class RedisSentinelServers(_Group):
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels watching service ``name``."""

    def __init__(
        self, *, service: str = "trio-streams", replicas: int = 1, sentinels: int = 2
    ) -> None:
        super().__init__()
        self.service = service
        self._replica_count = replicas
        self._sentinel_count = sentinels
        self.data_nodes: list[RedisServer] = []
        self.sentinels: list[RedisServer] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"{s.host}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def primary(self) -> RedisServer:
        """The data node the sentinels currently name as primary."""
        host, port = self.sentinels[0].command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        for server in self.data_nodes:
            if server.port == int(port):
                return server
        raise ServerLaunchError(f"sentinels name unknown primary {host!r}:{port!r}")

    def start(self) -> Self:
        primary = self.add(RedisServer(self.directory, name="sentinel-set primary")).start()
        self.data_nodes = [primary]
        for _ in range(self._replica_count):
            replica = self.add(
                RedisServer(
                    self.directory,
                    name="sentinel-set replica",
                    extra_args=["--replicaof", primary.host, str(primary.port)],
                )
            )
            replica.start()
            replica.wait_for_log(REPLICA_SYNCED)
            self.data_nodes.append(replica)
        # Failovers in tests are forced (SENTINEL FAILOVER), never waited for. With a quorum of
        # one, a sentinel starved of CPU for a second on a loaded machine would otherwise take
        # a healthy primary for dead and fail over on its own, under a test's feet.
        config = (
            f"sentinel monitor {self.service} {primary.host} {primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 10000\n"
            f"sentinel failover-timeout {self.service} 4000\n"
            f"sentinel parallel-syncs {self.service} 1\n"
        )
        for _ in range(self._sentinel_count):
            sentinel = self.add(
                RedisServer(self.directory, name="sentinel", sentinel_config=config)
            )
            self.sentinels.append(sentinel.start())
        for sentinel in self.sentinels:  # each must know the replica before it can fail over
            for replica in self.data_nodes[1:]:
                sentinel.wait_for_log(rf"\+slave slave {replica.host}:{replica.port} ")
        self._wait_replicas_promotable()
        return self

    def _wait_replicas_promotable(self, timeout: float = START_TIMEOUT) -> None:
        """Sentinels promote only a replica they have read INFO from recently (no log line says
        when); after a failover the demoted primary qualifies only once it is reconfigured."""

        def ready() -> bool:
            for sentinel in self.sentinels:
                replicas = sentinel.command("SENTINEL", "REPLICAS", self.service)
                fields = [dict(zip(r[::2], r[1::2], strict=True)) for r in replicas]
                good = [
                    f
                    for f in fields
                    if f.get(b"flags") == b"slave"
                    and int(f.get(b"info-refresh", b"99999")) < 5000
                    and f.get(b"master-link-status") == b"ok"
                ]
                if not good:
                    return False
            return True

        poll_until(ready, timeout=timeout, what=f"sentinels of {self.service!r} to see replicas")

    def failover(self, *, timeout: float = START_TIMEOUT) -> RedisServer:
        """Force a failover and return the new primary once the sentinels switched to it."""
        old = self.primary()
        self._wait_replicas_promotable(timeout)
        marks = [s.log_mark() for s in self.sentinels]
        self.sentinels[0].command("SENTINEL", "FAILOVER", self.service)
        for sentinel, mark in zip(self.sentinels, marks, strict=True):
            sentinel.wait_for_log(
                rf"\+switch-master {re.escape(self.service)} .* {old.port} ",
                timeout=timeout,
                since=mark,
            )
        return self.primary()


def redis_version() -> tuple[int, ...]:
    """The chosen server's version, e.g. ``(7, 0, 15)``."""
    return server_build().version
