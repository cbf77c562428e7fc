"""``trio-streams run --workers N`` and ``--reload``: one app in worker processes, supervised.

The supervisor is a small Trio program. It checks the app first (imported, never run, in the
supervisor): a subscription that would hand every message to every worker is refused unless
the user allows it, and so is a consumer name fixed in the code (N workers would be one
consumer) or a consumer one process at a time can run (a stream file's durable one). Then it
starts the workers, each ``trio-streams run MODULE:ATTRIBUTE`` in its own session (so a Ctrl-C
in the terminal reaches the supervisor alone), and owns them in one nursery:

- **Signals.** The first SIGINT/SIGTERM is forwarded to every worker as SIGTERM: each drains
  and stops. A second one is forwarded too: each worker cancels at once. A third kills them.
- **Crashes.** A worker that exits on its own with a failure status (or is killed) is
  restarted after a pause that starts at ``backoff`` seconds and doubles, up to
  ``max_backoff``; a run of ``stable_after`` seconds resets it. ``crash_limit`` crashes of one
  worker within ``crash_window`` seconds mean it keeps crashing: the supervisor stops the
  others and exits 1. Exit status 2 (a bad command line, not an App) is not retried. A worker
  whose app finished by itself (status 0) is not restarted.
- **Orphans.** Each worker holds the read end of a pipe whose write end only the supervisor
  has; if the supervisor dies without a word (SIGKILL), the pipe closes and the worker drains
  and stops as on SIGTERM.
- **Endpoints** (``--http``): the supervisor alone listens on the address and answers for the
  whole app (:mod:`.supervisor_http`); each worker serves its own endpoints on a private Unix
  socket in a directory this supervisor made (mode 0700), named per start of its slot.
- **Reload** (``--reload``, one worker): on a change to a ``.py`` file under the watched
  directories (``watchfiles``), the worker is stopped with SIGTERM (a clean drain) and started
  again with the new code. A worker that exits with a failure (a file saved mid-edit does not
  import) is neither restarted nor given up on: the next change starts it.

Each worker finds its index in ``TRIO_STREAMS_WORKER`` (0 to N-1) and the count in
``TRIO_STREAMS_WORKERS``. Cancelled (the supervisor's own run ends), the workers are sent
SIGTERM and waited for; a worker still running after ``kill_after`` seconds is killed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import final

import trio

from ..core import signal_guard
from ..core.app import App
from ..core.extras import importing
from ..core.transport import Sharing
from .supervisor_http import WORKER_HTTP_ENV

__all__ = ["SupervisorPolicy", "check_workers", "supervise", "watch_supervisor", "worker_command"]

_log = logging.getLogger("trio_streams.supervisor")

#: Environment variables a worker reads: its index, the worker count, the supervisor's pipe.
WORKER_ENV = "TRIO_STREAMS_WORKER"
WORKERS_ENV = "TRIO_STREAMS_WORKERS"
SUPERVISOR_FD_ENV = "TRIO_STREAMS_SUPERVISOR_FD"

#: A worker's exit status that restarting cannot help: a bad command line, not an App.
_USAGE = 2


@final
@dataclass(frozen=True, slots=True)
class SupervisorPolicy:
    """How the supervisor restarts workers (seconds)."""

    workers: int = 1
    backoff: float = 0.5
    max_backoff: float = 30.0
    stable_after: float = 10.0
    crash_limit: int = 5
    crash_window: float = 60.0
    kill_after: float = 60.0
    reload: bool = False
    reload_dirs: tuple[Path, ...] = field(default_factory=tuple)


def check_workers(app: App, workers: int, *, allow_broadcast: bool) -> list[str]:
    """What stops ``app`` from running in ``workers`` processes: one line per subscription
    (empty: nothing)."""
    if workers <= 1:
        return []
    problems: list[str] = []
    for broker in app.brokers:
        for subscription in broker.subscriptions:
            source = subscription.source
            where = f"subscription {subscription.name!r} ({source!r})"
            if source.sharing is Sharing.EVERY and source.consumer_name is not None:
                problems.append(
                    f"{where} is the consumer {source.consumer_name!r}, which one process at a "
                    f"time can run: {workers} workers cannot each run it, even with "
                    "--allow-broadcast; read it from one process (leave out --workers, or move "
                    "it to an app of its own)"
                )
            elif source.sharing is Sharing.EVERY and not allow_broadcast:
                problems.append(
                    f"{where} would deliver every message to each of the {workers} workers "
                    "(it does not share work across processes); read it from one process, or "
                    "pass --allow-broadcast if every worker should handle every message"
                )
            if source.sharing is Sharing.SPLIT and source.consumer_name is not None:
                problems.append(
                    f"{where} names the consumer {source.consumer_name!r}: {workers} workers "
                    "would be that one consumer; leave consumer= out (each worker gets its own "
                    f"name) or derive it from the {WORKER_ENV} environment variable"
                )
    return problems


class _Worker:
    """One worker slot: the process now running in it, and its crash history."""

    def __init__(
        self,
        index: int,
        command: Sequence[str],
        policy: SupervisorPolicy,
        endpoints: Path | None = None,
    ) -> None:
        self.index = index
        self._command = list(command)
        self._policy = policy
        self.process: trio.Process | None = None
        self._crashes: deque[float] = deque()
        self.restarts = 0
        #: Where the slot's workers serve their endpoints (``--http``): a private directory.
        self._endpoints = endpoints
        #: Which start of the slot the current process is (it changes at each start).
        self.generation = 0
        #: The socket the current process serves its endpoints on, None between processes.
        self.endpoint: Path | None = None

    async def run(self, stopping: trio.Event, gave_up: trio.Event, reload: trio.Event) -> int:
        """Keep this slot's worker running until ``stopping``; returns the last exit status.
        Sets ``gave_up`` when the worker keeps crashing (or cannot start at all). Returns at
        once after ``reload`` stopped the worker: the caller starts the slot again."""
        pause = self._policy.backoff
        status = 0
        while not stopping.is_set():  # a signal may come before the first start
            started = trio.current_time()
            status = await self._run_once(reload, stopping)
            if stopping.is_set() or reload.is_set():
                return status  # the caller starts it again after a reload
            if status == 0:
                _log.info("worker %d: its app finished by itself (exit 0)", self.index)
                return status
            if self._policy.reload:
                # Mid-edit: a file saved half-written does not import. Restarting cannot help
                # before the code changes again; the next change starts it.
                _log.error(
                    "worker %d: %s; starting it again at the next change",
                    self.index,
                    _status(status),
                )
                await _either(reload, stopping)
                return status
            now = trio.current_time()
            self._crashes.append(now)
            while self._crashes and self._crashes[0] < now - self._policy.crash_window:
                self._crashes.popleft()
            if status == _USAGE or len(self._crashes) >= self._policy.crash_limit:
                why = (
                    "its command line or target is wrong"
                    if status == _USAGE
                    else f"it crashed {len(self._crashes)} times in {self._policy.crash_window:g} s"
                )
                _log.error("worker %d: %s (%s): giving up", self.index, _status(status), why)
                gave_up.set()
                return status
            if now - started >= self._policy.stable_after:
                pause = self._policy.backoff
            _log.warning("worker %d: %s; restarting in %.1f s", self.index, _status(status), pause)
            with trio.move_on_after(pause):
                await stopping.wait()
            if stopping.is_set():
                return status
            pause = min(pause * 2, self._policy.max_backoff)
            self.restarts += 1
        return status

    async def _run_once(self, reload: trio.Event, stopping: trio.Event) -> int:
        read_fd, write_fd = os.pipe()
        env = dict(
            os.environ,
            **{
                WORKER_ENV: str(self.index),
                WORKERS_ENV: str(self._policy.workers),
                SUPERVISOR_FD_ENV: str(read_fd),
            },
        )
        self.generation += 1
        endpoint = None
        if self._endpoints is not None:
            endpoint = self._endpoints / f"worker-{self.index}.{self.generation}.sock"
            env[WORKER_HTTP_ENV] = f"unix:{endpoint}"
        try:
            process = await trio.lowlevel.open_process(
                self._command, env=env, pass_fds=(read_fd,), start_new_session=True
            )
        finally:
            os.close(read_fd)
        self.process, self.endpoint = process, endpoint
        _log.info("worker %d: started (pid %d)", self.index, process.pid)
        if stopping.is_set():
            # The stop came while the process was being spawned, when there was no process
            # to forward it to: it gets it now, and stops as one in its start-up does.
            process.send_signal(signal.SIGTERM)
        try:
            async with trio.open_nursery() as nursery:

                async def stop_on_reload() -> None:
                    await reload.wait()
                    process.send_signal(signal.SIGTERM)

                nursery.start_soon(stop_on_reload)
                status = await process.wait()
                nursery.cancel_scope.cancel()
            return status
        finally:
            with trio.CancelScope(shield=True):
                await self._reap(process)
            os.close(write_fd)
            self.process = self.endpoint = None
            if endpoint is not None:
                endpoint.unlink(missing_ok=True)

    async def _reap(self, process: trio.Process) -> None:
        """Cancelled or done: make sure the process is gone (SIGTERM, then SIGKILL)."""
        if process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(self._policy.kill_after):
            await process.wait()
            return
        process.kill()
        await process.wait()

    def signal(self, signum: int) -> None:
        process = self.process
        if process is not None and process.returncode is None:
            process.send_signal(signum)


async def _either(first: trio.Event, second: trio.Event) -> None:
    """Wait until ``first`` or ``second`` is set. Cancelled, it stops waiting."""
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(wait, first)
        nursery.start_soon(wait, second)


def _status(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


async def supervise(
    command: Sequence[str], policy: SupervisorPolicy, *, http: tuple[str, int] | None = None
) -> int:
    """Run ``policy.workers`` copies of ``command`` until a signal stops them, or one keeps
    crashing. Returns the supervisor's exit status: 0 after a graceful stop, 1 when a worker
    kept crashing (2 when its command line is wrong), 130 when a second signal cut the drain
    short. With ``http`` (``HOST:PORT``), the supervisor serves the app's endpoints there
    (:mod:`.supervisor_http`); a taken address raises ``EndpointError`` before any worker
    starts."""
    if http is None:
        return await _supervise(command, policy, None)
    from .http_endpoints import EndpointError, check_free

    if importlib.util.find_spec("hypercorn") is None:
        raise EndpointError("--http needs hypercorn: pip install 'trio-streams[http]'")
    where = check_free(*http)
    with tempfile.TemporaryDirectory(prefix="trio-streams-") as private:  # mode 0700
        return await _supervise(command, policy, (where, Path(private)))


async def _supervise(
    command: Sequence[str], policy: SupervisorPolicy, http: tuple[str, Path] | None
) -> int:
    stopping = trio.Event()
    gave_up = trio.Event()
    forced = False
    endpoints = None if http is None else http[1]
    workers = [_Worker(i, command, policy, endpoints) for i in range(policy.workers)]
    statuses: list[int] = [0] * len(workers)
    reload_event = trio.Event()

    async def run_slot(worker: _Worker) -> None:
        nonlocal reload_event
        while True:
            statuses[worker.index] = await worker.run(stopping, gave_up, reload_event)
            if not reload_event.is_set() or stopping.is_set():
                return
            reload_event = trio.Event()  # the restarted worker waits for the next change

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        early = signal_guard.take()  # came before the receiver opened, as Trio started
        if early:
            name = signal.Signals(early[0]).name
            _log.warning("supervisor: %s received while starting, stopping at once", name)
            return 128 + signal.SIGINT
        async with trio.open_nursery() as nursery:
            _log.info(
                "supervisor: starting %d worker(s) of %s", policy.workers, " ".join(command[3:])
            )

            async def slots() -> None:
                async with trio.open_nursery() as inner:
                    for worker in workers:
                        inner.start_soon(run_slot, worker)
                nursery.cancel_scope.cancel()  # every slot is done

            async def watch_signals() -> None:
                nonlocal forced
                received = 0
                async for signum in signals:
                    received += 1
                    name = signal.Signals(signum).name
                    stopping.set()
                    if received == 1:
                        _log.warning("supervisor: %s received, draining the workers", name)
                        send = signal.SIGTERM
                    elif received == 2:
                        _log.warning("supervisor: second signal (%s), cancelling them", name)
                        forced = True
                        send = signal.SIGTERM
                    else:
                        _log.warning("supervisor: third signal (%s), killing them", name)
                        send = signal.SIGKILL
                    for worker in workers:
                        worker.signal(send)

            async def watch_give_up() -> None:
                await gave_up.wait()
                stopping.set()
                for worker in workers:
                    worker.signal(signal.SIGTERM)

            async def watch_sources() -> None:
                nonlocal reload_event
                with importing("reload", "--reload"):
                    from watchfiles import PythonFilter, awatch

                dirs = policy.reload_dirs or (Path.cwd(),)
                _log.info("supervisor: reloading on changes under %s", ", ".join(map(str, dirs)))
                async for changes in awatch(*dirs, watch_filter=PythonFilter()):
                    changed = sorted({Path(path).name for _, path in changes})
                    _log.warning("supervisor: %s changed, restarting", ", ".join(changed))
                    reload_event.set()

            if http is not None:
                from .http_endpoints import serve_asgi
                from .supervisor_http import app_asgi

                nursery.start_soon(
                    partial(serve_asgi, app_asgi(workers, stopping), http[0], announce=True)
                )
            nursery.start_soon(slots)
            nursery.start_soon(watch_signals)
            nursery.start_soon(watch_give_up)
            if policy.reload:
                nursery.start_soon(watch_sources)
    if gave_up.is_set():
        return _USAGE if _USAGE in statuses else 1
    if forced:
        return 128 + signal.SIGINT
    return 0


def worker_command(argv: Sequence[str]) -> list[str]:
    """The command line of one worker: this interpreter running ``trio-streams run`` with the
    options the worker takes (``argv``)."""
    return [sys.executable, "-m", "trio_streams", "run", *argv]


def watch_supervisor() -> None:
    """In a worker: when the supervisor's pipe closes (it died), stop as on SIGTERM.

    A daemon thread blocks on the pipe; on end of file it sends this process SIGTERM, which
    the app's own signal handling turns into a graceful drain. Nothing happens outside a
    supervised worker."""
    raw = os.environ.pop(SUPERVISOR_FD_ENV, None)
    if raw is None:
        return
    fd = int(raw)

    def wait_for_eof() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait_for_eof, name="supervisor watch", daemon=True).start()
