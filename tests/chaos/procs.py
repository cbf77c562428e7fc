"""The consumer processes of one workload: started, killed (SIGKILL), stopped (SIGTERM) and
restarted under the same name, each fault counted."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import trio

from tests.redis.streams.procs import ROOT, Consumer
from trio_streams.testing.faults import (
    AppProcess,
    KillPoint,
    KillPointMissed,
    KillPointNotReached,
)

#: Seconds a consumer gets to report it started (a restart under a name whose holder was just
#: killed waits out the name's lease first).
READY_WITHIN = 30.0
#: Seconds a consumer armed with a kill point gets to reach it.
KILL_POINT_WITHIN = 5.0
#: Starts a name gets before the workload gives up on it.
STARTS = 5


class ConsumerGone(Exception):
    """A consumer could not be (re)started; the message has its last output lines."""


class Consumers:
    """Consumers ``c0``, ``c1``… (``prefix`` and a number) of one workload, each one process at
    a time."""

    def __init__(
        self,
        kind: str,
        url: str,
        key: str,
        runlog: Path,
        seed: int,
        count: int,
        *,
        prefix: str = "c",
    ) -> None:
        self.kind, self.url, self.key, self.runlog = kind, url, key, runlog
        self.rng = random.Random(seed)
        self.names = [f"{prefix}{i}" for i in range(count)]
        self.running: dict[str, Consumer] = {}
        self.faults: Counter[str] = Counter()
        #: Armed processes that ended before their kill point, and why.
        self.missed: list[str] = []
        self._incarnation = 0

    async def start(self, name: str) -> None:
        """Start ``name`` and wait until it reports started; a start that fails (the process
        exits first) is tried again, up to :data:`STARTS` times."""
        for _ in range(STARTS):
            self._incarnation += 1
            consumer = Consumer(
                self.kind,
                self.url,
                self.key,
                name,
                self.runlog,
                self.rng.randrange(1 << 30),
                module="tests.chaos.consumer",
                with_stderr=True,
            )
            self.running[name] = consumer
            try:
                await consumer.wait_line("ready", within=READY_WITHIN)
                return
            except AssertionError:
                await trio.to_thread.run_sync(consumer.kill)
                self._keep_output(name, consumer.process.pid, consumer.lines)
        raise ConsumerGone(f"{self.kind} consumer {name} did not start: {consumer.lines[-10:]}")

    async def start_all(self) -> None:
        for name in self.names:
            await self.start(name)

    def _keep_output(self, name: str, pid: int, lines: list[str] | str) -> None:
        """Write a finished process's output beside the ledger (``<ledger>.<name>.<pid>.log``),
        where a defect's investigation reads what the consumer logged."""
        text = lines if isinstance(lines, str) else "\n".join(lines)
        self.runlog.with_name(f"{self.runlog.name}.{name}.{pid}.log").write_text(text)

    async def kill(self, name: str) -> None:
        """SIGKILL ``name`` wherever it is, then start it again."""
        consumer = self.running[name]
        await trio.to_thread.run_sync(consumer.kill)
        self._keep_output(name, consumer.process.pid, consumer.lines)
        self.faults["SIGKILL"] += 1
        await self.start(name)

    async def stop(self, name: str) -> None:
        """SIGTERM ``name`` (a graceful stop: it drains what it read), then start it again."""
        await self.stop_only(name)
        self.faults["SIGTERM"] += 1
        await self.start(name)

    async def kill_at(self, name: str, point: KillPoint) -> None:
        """Stop ``name`` (SIGTERM), run it again under the kit's ``AppProcess`` armed to die
        (SIGKILL) exactly at ``point``, wait for that, then start it again. A point that does
        not come within the process's timeout (nothing to deliver) ends in a plain SIGKILL."""
        await self.stop_only(name)
        self.faults["SIGTERM"] += 1
        self._incarnation += 1
        app = AppProcess(
            "tests.chaos.consumer",
            self.kind,
            self.url,
            self.key,
            name,
            self.runlog,
            self.rng.randrange(1 << 30),
            kill_at=point,
            cwd=ROOT,
            timeout=KILL_POINT_WITHIN,
        )
        async with app:
            try:
                await app.killed()
                self.faults[f"SIGKILL {point.kind}"] += 1
            except KillPointNotReached:
                app.kill()
                await app.wait()
                self.faults["SIGKILL"] += 1
            except KillPointMissed as missed:  # it could not start: the restart below says why
                self.missed.append(str(missed))
            self._keep_output(name, app.pid, (app.stdout + app.stderr).decode(errors="replace"))
        await self.start(name)

    async def stop_only(self, name: str) -> None:
        consumer = self.running.pop(name)
        await trio.to_thread.run_sync(consumer.stop)
        self._keep_output(name, consumer.process.pid, consumer.lines)
        code = consumer.process.returncode
        if code not in (0, None):
            raise ConsumerGone(
                f"{self.kind} consumer {name} exited {code} on SIGTERM: {consumer.lines[-10:]}"
            )

    async def stop_all(self) -> None:
        for name in list(self.running):
            await self.stop_only(name)

    def kill_all_now(self) -> None:
        """Cleanup after a failure: SIGKILL whatever still runs."""
        for name, consumer in self.running.items():
            consumer.kill()
            self._keep_output(name, consumer.process.pid, consumer.lines)
        self.running.clear()
