"""``App``: brokers, lifecycle hooks, shared state, and the structured way to run them.

``await nursery.start(app.serve)`` mounts the app in your nursery and hands back a
``RunningApp``; ``app.run()`` runs it standalone, draining on SIGINT/SIGTERM and cancelling at
once on a second signal. Shutdown is always the same: stop reading, let in-flight handlers and
pending delayed retries finish within ``shutdown_timeout`` (then cancel what is left), and close
brokers in the reverse order they connected.
"""

from __future__ import annotations

import enum
import inspect
import logging
import math
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, final

import trio
from trio_util import AsyncValue

from . import signal_guard
from ._escapes import escaped
from .banner import log_banner
from .broker import Broker
from .dispatch import HandledMessage
from .errors import ConfigurationError, TrioStreamsError
from .groups import leaves, raise_lone_errors, reraise_unwrapped
from .host import Fault
from .loading import refuse_run_while_importing
from .logs import configure_default
from .middleware import Middleware, check_middlewares, observe_hooks
from .reporting import describe, report
from .routing import Subscription
from .subscription import SubscriptionRunner, SubscriptionState, SubscriptionStats
from .transport import Transport

if TYPE_CHECKING:
    from ..testing.harness import TestClient

__all__ = ["App", "AppFailed", "Health", "HealthState", "RunningApp", "State"]

B = TypeVar("B", bound=Broker)
Hook = Callable[..., Any]
H = TypeVar("H", bound=Hook)
#: ``lifespan``: a function of no argument, or of the app, returning an async context manager.
Lifespan = Callable[..., AbstractAsyncContextManager[Any]]
L = TypeVar("L", bound=Lifespan)
#: ``@app.task``: an ``async def`` of no argument, or of the app.
TaskFunction = Callable[..., Any]
T = TypeVar("T", bound=TaskFunction)

DEFAULT_SHUTDOWN_TIMEOUT = 10.0


class AppFailed(TrioStreamsError):
    """The app did not start, or stopped because a subscription failed; ``__cause__`` is the
    error (an exception group when several errors stopped it)."""


class HealthState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    #: Running, while a transport recovers from a fault (the reason names each one).
    DEGRADED = "degraded"
    SHUTTING_DOWN = "shutting down"
    STOPPED = "stopped"
    FAILED = "failed"


@final
@dataclass(frozen=True, slots=True)
class Health:
    state: HealthState
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """Running, degraded or not: a degraded app still serves (a load balancer keeps it)."""
        return self.state is HealthState.RUNNING or self.state is HealthState.DEGRADED

    def __str__(self) -> str:
        return f"{self.state.value}: {self.reason}" if self.reason else self.state.value


class State:
    """Shared state for handlers (``ctx.state``): set attributes in startup hooks."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes that were never set.
        raise AttributeError(
            f"app.state has no {name!r}; set it in an on_startup hook (app.state.{name} = ...)"
        )

    def __repr__(self) -> str:
        return f"State({vars(self)!r})"


@dataclass(slots=True)
class RunOptions:
    """How one run connects brokers and who watches it.

    ``serve`` runs with the defaults (each broker's own transport); ``app.test()`` runs the same
    app through :meth:`App.serve_with` on in-process transports with its observers. Not part of
    the top-level face: it exists so the harness needs nothing private of the app.
    """

    connect: Callable[[Broker], AbstractAsyncContextManager[Transport]]
    shutdown_timeout: float
    stop_when_finished: bool = True
    observers: tuple[Callable[[HandledMessage], None], ...] = ()
    fault_observers: tuple[Callable[[Fault], None], ...] = ()
    on_change: Callable[[], None] | None = None
    runners: list[SubscriptionRunner] = field(default_factory=list)
    #: Dependency -> replacement, for every handler (``app.test(dependency_overrides=...)``).
    dependency_overrides: Mapping[Callable[..., Any], Callable[..., Any]] = field(
        default_factory=dict
    )


class RunningApp:
    """The handle ``serve`` gives back: publish, watch health, and shut down."""

    def __init__(self, app: App, runners: Sequence[SubscriptionRunner]) -> None:
        self.app = app
        self._runners = runners
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._failure: BaseException | None = None

    @property
    def health(self) -> AsyncValue[Health]:
        """The app's health, a trio-util ``AsyncValue``: read ``.value``, or wait for a state
        with ``await running.health.wait_value(lambda h: h.ok)``."""
        return self.app.health

    @property
    def subscriptions(self) -> dict[str, SubscriptionState]:
        """Each subscription's state, by name."""
        return {runner.label: runner.state for runner in self._runners}

    def stats(self) -> dict[str, SubscriptionStats]:
        """A snapshot of every subscription: queued, outstanding, delayed, unread, stale."""
        return {runner.label: runner.stats() for runner in self._runners}

    async def publish(
        self,
        broker: Broker,
        destination: str,
        message: Any,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Publish ``message`` to ``destination`` on ``broker``; returns the transport's receipt."""
        return await broker.publish(destination, message, headers=headers)

    def request_stop(self) -> None:
        """Begin a graceful shutdown (returns at once)."""
        self._stop.set()

    async def aclose(self) -> None:
        """Shut down gracefully and wait until every broker has closed."""
        self.request_stop()
        await self._stopped.wait()

    async def wait_stopped(self) -> None:
        """Wait until the app has stopped (whatever stopped it) and every broker has closed.

        Cancelled, it stops waiting; the app runs on."""
        await self._stopped.wait()

    async def wait_finished(self) -> None:
        """Wait until every subscription has ended (replays finished, live ones stopped)."""
        for runner in self._runners:
            await runner.finished.wait()

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._stop.set()


class App:
    """A service: brokers with their subscriptions, hooks, and shared state.

    ``name`` is part of its logger's name, of its retry targets and of its default Redis
    consumer names: an empty name, whitespace, control characters and ``/ : # @`` are refused
    (``ConfigurationError``). ``shutdown_timeout`` bounds the graceful drain. With
    ``stop_when_finished`` (the default) an app whose subscriptions have all ended (replays
    that reached their end) stops by itself.
    ``lifespan`` is an async context manager factory wrapping the whole run (see
    :meth:`lifespan`).
    """

    def __init__(
        self,
        name: str = "app",
        *,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        stop_when_finished: bool = True,
        lifespan: Lifespan | None = None,
        middlewares: Sequence[Middleware] | None = None,
    ) -> None:
        self.name = check_app_name(name)
        #: Wrap every subscription's handling and every publish, outside the brokers', routers'
        #: and subscribers' own (:mod:`trio_streams.core.middleware`).
        self.middlewares = check_middlewares(middlewares, where=f"App({name!r})")
        for middleware in self.middlewares:
            attach = getattr(middleware, "attach", None)
            if callable(attach):
                attach(self)  # a middleware that reads the running app (metrics)
        #: The running app while it serves (None otherwise).
        self.running: RunningApp | None = None
        self.shutdown_timeout = check_shutdown_timeout(shutdown_timeout)
        self.stop_when_finished = stop_when_finished
        self.state = State()
        self.health: AsyncValue[Health] = AsyncValue(Health(HealthState.STOPPED))
        self.logger = logging.getLogger(f"trio_streams.app.{name}")
        self._brokers: list[Broker] = []
        self._hooks: dict[str, list[Hook]] = {
            "on_startup": [],
            "after_startup": [],
            "on_shutdown": [],
            "after_shutdown": [],
        }
        self._lifespans: list[Lifespan] = [] if lifespan is None else [_check_lifespan(lifespan)]
        self._tasks: list[TaskFunction] = []
        self._running = False

    def __repr__(self) -> str:
        return f"App({self.name!r})"

    # ---- declaring ---------------------------------------------------------------------------

    def broker(self, broker: B) -> B:
        """Register ``broker``; brokers connect in this order and close in reverse."""
        if not isinstance(broker, Broker):
            raise ConfigurationError(f"app.broker() takes a Broker, not {broker!r}")
        if broker in self._brokers:
            raise ConfigurationError(f"{broker!r} is already registered on {self.name!r}")
        self._brokers.append(broker)
        broker.app_middlewares = self.middlewares
        broker.registered = True
        return broker

    @property
    def brokers(self) -> list[Broker]:
        return list(self._brokers)

    def check_installed(self) -> None:
        """Raise :class:`~trio_streams.core.extras.MissingExtra` when a broker's optional
        dependency is missing (``RedisBroker`` without hiredis). ``run`` and ``trio-streams
        run`` call it before the app starts; ``app.test()`` does not: it connects to nothing."""
        for broker in self._brokers:
            broker.check_installed()

    def on_startup(self, hook: H) -> H:
        """Run before brokers connect (set up ``app.state``). Takes no argument or the app."""
        self._hooks["on_startup"].append(hook)
        return hook

    def after_startup(self, hook: H) -> H:
        """Run once every subscription is running."""
        self._hooks["after_startup"].append(hook)
        return hook

    def on_shutdown(self, hook: H) -> H:
        """Run when shutdown begins, before reading stops; brokers are still connected."""
        self._hooks["on_shutdown"].append(hook)
        return hook

    def after_shutdown(self, hook: H) -> H:
        """Run after every broker has closed."""
        self._hooks["after_shutdown"].append(hook)
        return hook

    def lifespan(self, factory: L) -> L:
        """Wrap the whole run in ``factory()`` (or ``factory(app)``), an async context manager:
        entered before the ``on_startup`` hooks and brokers connect, left after the brokers have
        closed and the ``after_shutdown`` hooks ran — whether the run ended well, failed, or was
        cancelled. Several are entered in the order given and left in reverse.

        For resources the handlers share (a database pool, an HTTP client): open them before
        the ``yield``, put them in ``app.state``, close them after. A failure before the
        ``yield`` fails the start; the app never reports started. For work that runs alongside
        the handlers, use :meth:`task`.
        """
        self._lifespans.append(_check_lifespan(factory))
        return factory

    def task(self, fn: T) -> T:
        """Run ``async def fn()`` (or ``fn(app)``) for as long as the app runs: a periodic job,
        a metrics pusher, a watcher.

        It is a task in the app's nursery, started once every subscription is running and the
        ``after_startup`` hooks have run (so it may publish), and cancelled at shutdown after
        the drain, before the brokers close: ``trio.Cancelled`` reaches it at its next
        checkpoint, and its ``finally`` blocks run then. A task that returns just ends; one that
        raises fails the app, like a failing subscription, and the app shuts down gracefully.
        """
        if not inspect.iscoroutinefunction(fn):
            raise ConfigurationError(f"app.task() takes an `async def` function, not {fn!r}")
        self._tasks.append(fn)
        return fn

    # ---- running -----------------------------------------------------------------------------

    async def serve(
        self,
        *,
        shutdown_timeout: float | None = None,
        task_status: trio.TaskStatus[RunningApp] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run in the caller's nursery: ``running = await nursery.start(app.serve)``.

        An error that fails the start (a broker that cannot connect, a hook, a source that
        cannot open) or stops the app is raised as itself, not wrapped in the exception groups
        of the app's own nurseries; several errors are raised together as a group.
        """
        timeout = (
            self.shutdown_timeout
            if shutdown_timeout is None
            else check_shutdown_timeout(shutdown_timeout)
        )
        await self.serve_with(
            RunOptions(
                connect=connect_broker,
                shutdown_timeout=timeout,
                stop_when_finished=self.stop_when_finished,
            ),
            task_status,
        )

    def run(self, *, shutdown_timeout: float | None = None) -> bool:
        """Run standalone until SIGINT/SIGTERM (graceful) or a second signal (at once).

        A signal while the app is still starting (a hook, a lifespan, a broker connecting)
        stops it at once: there is nothing to drain yet. Returns True after a graceful stop,
        False when a signal cut the start or the drain short.
        Logs to stderr at INFO, unless logging is configured already. When the app does not
        start, or a subscription fails, it prints one line per error to stderr, naming the
        cause and, where it is known, what to do (the traceback is logged at DEBUG), and exits
        with status 1: it raises ``SystemExit(1)``, whose ``__cause__`` is the ``AppFailed``.

        Called while ``trio-streams run`` imports the module (a module-level ``app.run()``,
        not under ``if __name__ == "__main__":``), it raises ``ConfigurationError`` at once:
        the CLI runs the app itself once the import returns.
        """
        refuse_run_while_importing(self.name)
        configure_default()
        try:
            return self.run_until_stopped(shutdown_timeout=shutdown_timeout)
        except AppFailed as failure:
            report(
                failure,
                prefix=self.name,
                out=sys.stderr,
                logger=self.logger,
                traceback_hint="its traceback is logged at DEBUG",
            )
            raise SystemExit(1) from failure

    def run_until_stopped(self, *, shutdown_timeout: float | None = None) -> bool:
        """``run`` without its logging set-up and its exit: raises ``AppFailed`` instead.

        ``AppFailed`` says whether the app did not start or stopped, and why; ``__cause__`` is
        the error itself. Refused, as ``run`` is, while ``trio-streams run`` imports a module.
        """
        refuse_run_while_importing(self.name)
        timeout = None if shutdown_timeout is None else check_shutdown_timeout(shutdown_timeout)
        try:
            self.check_installed()  # a missing extra: refused before anything starts
            with signal_guard.holding():  # a signal before Trio's receiver is not lost
                return trio.run(self._run_with_signals, timeout)
        except AppFailed:
            raise
        except Exception as error:
            raise AppFailed(f"app {self.name!r} failed: {describe(error)}") from error
        except BaseException as error:  # sys.exit() in a lifespan, say: one line, not a crash
            stop = escaped(error, f"app {self.name!r}: its code")
            if stop is None:
                raise
            raise AppFailed(f"app {self.name!r} failed: {stop}") from error

    def test(
        self,
        *,
        settle_timeout: float = 30.0,
        raise_errors: bool = False,
        dependency_overrides: Mapping[Callable[..., Any], Callable[..., Any]] | None = None,
    ) -> AbstractAsyncContextManager[TestClient]:
        """Run this app on in-process transports: ``async with app.test() as t: ...``.

        ``settle_timeout`` bounds each wait for the app to settle (on Trio's clock). Handler
        errors run the failure policy as in production and are recorded
        (``t.handler(fn).errors``); with ``raise_errors=True`` the first one since the last
        ``publish``/``settled`` is also raised from it. ``dependency_overrides`` maps a
        dependency (the function given to ``Depends``) to its replacement, wherever it is used;
        each is checked as at mount, and one that no handler uses is refused.
        """
        from ..testing.harness import run_test_client

        return run_test_client(
            self,
            settle_timeout=settle_timeout,
            raise_errors=raise_errors,
            dependency_overrides=dependency_overrides,
        )

    async def _run_with_signals(self, shutdown_timeout: float | None) -> bool:
        """Serve until stopped, hearing SIGINT/SIGTERM from the start: a signal while the app
        starts (a hook that waits, a broker that connects slowly) stops it at once; once it is
        running, the first drains and a second cancels. Returns False when a signal cut the
        start or the drain short."""
        with (
            trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
            raise_lone_errors(),
        ):
            async with trio.open_nursery() as nursery:
                run = _SignalledRun(nursery)
                nursery.start_soon(self._watch_signals, signals, run)

                async def serve(task_status: trio.TaskStatus[RunningApp]) -> None:
                    try:
                        await self.serve(shutdown_timeout=shutdown_timeout, task_status=task_status)
                    finally:
                        run.over = True

                try:
                    running: RunningApp = await nursery.start(serve)
                except Exception as error:
                    raise _did_not_start(self.name, error) from error
                await running.wait_stopped()
                nursery.cancel_scope.cancel()
        return not run.cut_short

    async def _watch_signals(self, signals: AsyncIterator[int], run: _SignalledRun) -> None:
        """The signals that came before the receiver opened (held by ``signal_guard``), then the
        receiver's, until there is nothing left to stop. Cancelled with the run's nursery."""
        for signum in signal_guard.take():
            if not self._on_signal(signum, run):
                return
        async for signum in signals:
            if not self._on_signal(signum, run):
                return

    def _on_signal(self, signum: int, run: _SignalledRun) -> bool:
        """Act on one more signal; False once there is nothing left to do."""
        if run.over:
            return False  # the app has stopped: the run is ending anyway
        run.received += 1
        name = signal.Signals(signum).name
        running = self.running
        starting = self.health.value.state is HealthState.STARTING
        if run.received == 1 and running is not None and not starting:
            self.logger.warning("%s: %s received, shutting down gracefully", self.name, name)
            running.request_stop()
            return True
        if run.received == 1:
            self.logger.warning("%s: %s received while starting, stopping at once", self.name, name)
        else:
            self.logger.warning("%s: second signal (%s), cancelling now", self.name, name)
        run.cut_short = True
        run.nursery.cancel_scope.cancel()
        return False

    async def serve_with(
        self, options: RunOptions, task_status: trio.TaskStatus[RunningApp]
    ) -> None:
        """``serve``, with how brokers connect and who observes the run given by ``options``
        (the test harness's entry point; ``serve`` is this with the defaults)."""
        if self._running:
            raise ConfigurationError(f"app {self.name!r} is already running")
        self._running = True
        self.health.value = Health(HealthState.STARTING)
        runners = options.runners
        handle = RunningApp(self, runners)
        self.running = handle
        try:
            async with AsyncExitStack() as lifespans:
                for factory in self._lifespans:
                    await lifespans.enter_async_context(_call_with_app(factory, self))
                await self._run(options, handle, task_status)
        except BaseException as exc:
            if _only_cancelled(exc):
                self.health.value = Health(HealthState.STOPPED, "cancelled")
            else:
                self.health.value = Health(HealthState.FAILED, repr(_single_cause(exc)))
            if isinstance(exc, BaseExceptionGroup):
                reraise_unwrapped(exc)
            raise
        finally:
            self._running = False
            self.running = None
            handle._stopped.set()
        if handle._failure is not None:
            failure = handle._failure
            self.health.value = Health(HealthState.FAILED, str(failure))
            raise AppFailed(f"app {self.name!r} stopped: {failure}") from failure.__cause__
        self.health.value = Health(HealthState.STOPPED)
        self.logger.info("%s: stopped", self.name)

    async def _run(
        self, options: RunOptions, handle: RunningApp, task_status: trio.TaskStatus[RunningApp]
    ) -> None:
        """Hooks, brokers, subscriptions and tasks, inside the lifespans."""
        runners = options.runners
        await self._run_hooks("on_startup")
        async with AsyncExitStack() as stack:
            for broker in self._brokers:
                await stack.enter_async_context(broker.lifetime(options.connect(broker)))
            targets: dict[str, int] = {}
            for broker in self._brokers:
                for subscription in broker.subscriptions:
                    runner = self._make_runner(
                        subscription, broker, options, self._retry_target(subscription, targets)
                    )
                    runners.append(runner)
                    # A runner that never started (a later one failed to open) still
                    # closes its reader; one that ran closed it already.
                    stack.push_async_callback(runner.close_if_unstarted)
            async with trio.open_nursery() as nursery:
                for runner in runners:
                    await nursery.start(self._supervise, runner, handle)
                if runners and options.stop_when_finished:
                    nursery.start_soon(self._stop_when_finished, handle)
                await self._run_hooks("after_startup")
                for fn in self._tasks:
                    nursery.start_soon(self._run_task, fn, handle, name=f"task {fn!r}")
                self.health.value = Health(HealthState.RUNNING)
                self._refresh_health(runners)
                log_banner(self.logger, self.name, self._brokers, runners)
                if self._idle(runners):
                    self.logger.warning(
                        "%s: no broker, no subscription, no task, no hook and no lifespan: the "
                        "app has nothing to do (a broker must be registered with "
                        "app.broker(...))",
                        self.name,
                    )
                task_status.started(handle)
                await handle._stop.wait()
                reason = str(handle._failure) if handle._failure else None
                self.health.value = Health(HealthState.SHUTTING_DOWN, reason)
                await self._run_hooks("on_shutdown")
                await self._drain(runners, options.shutdown_timeout)
                nursery.cancel_scope.cancel()  # the app's tasks end here
        await self._run_hooks("after_shutdown")

    def _idle(self, runners: Sequence[SubscriptionRunner]) -> bool:
        """Whether the app has nothing to do: nothing to read, run or publish through.

        A registered broker counts even without subscribers: whoever serves the app (or its
        hooks, or a lifespan) publishes through it."""
        return not (
            runners or self._tasks or self._brokers or self._lifespans or any(self._hooks.values())
        )

    async def _run_task(self, fn: TaskFunction, handle: RunningApp) -> None:
        """One ``@app.task``: if it raises, fail the app (and so shut it down)."""
        try:
            await _call_with_app(fn, self)
        except Exception as exc:
            self.logger.error("%s: task %s failed", self.name, _name_of(fn), exc_info=exc)
            failure = TrioStreamsError(f"task {_name_of(fn)} failed: {exc!r}")
            failure.__cause__ = exc
            handle._fail(failure)
        except BaseException as exc:
            stop = escaped(exc, f"task {_name_of(fn)}")
            if stop is None:
                raise
            self.logger.error("%s: %s", self.name, stop)
            stop.__cause__ = exc
            handle._fail(stop)

    def _retry_target(self, subscription: Subscription, seen: dict[str, int]) -> str:
        """``<app>/<subscription>``, unique in the app: a name a later broker repeats gets
        ``#n`` (brokers are in registration order, so every process of the app agrees)."""
        target = f"{self.name}/{subscription.name}"
        count = seen.get(target, 0) + 1
        seen[target] = count
        return target if count == 1 else f"{target}#{count}"

    def _make_runner(
        self,
        subscription: Subscription,
        broker: Broker,
        options: RunOptions,
        retry_target: str | None = None,
    ) -> SubscriptionRunner:
        if options.dependency_overrides:
            handler = subscription.handler.overridden(options.dependency_overrides)
            subscription = replace(subscription, handler=handler)
        for middleware in subscription.middlewares:  # a broker's, router's or subscriber's
            attach = getattr(middleware, "attach", None)
            if callable(attach):
                attach(self)
        return SubscriptionRunner(
            subscription,
            broker.transport,
            app_state=self.state,
            logger=logging.getLogger(f"trio_streams.subscription.{subscription.name}"),
            on_change=options.on_change,
            observers=options.observers
            + observe_hooks(self.middlewares + subscription.middlewares),
            on_fault=lambda fault: self._fault_changed(fault, options),
            app_name=self.name,
            retry_target=retry_target,
            middlewares=self.middlewares + subscription.middlewares,
            broker_name=broker.name,
        )

    def _fault_changed(self, fault: Fault, options: RunOptions) -> None:
        for observer in options.fault_observers:
            observer(fault)
        self._refresh_health(options.runners)

    def _refresh_health(self, runners: Sequence[SubscriptionRunner]) -> None:
        """Running, or degraded while a fault of any subscription lasts."""
        if self.health.value.state not in (HealthState.RUNNING, HealthState.DEGRADED):
            return
        active = [
            str(fault)
            for runner in runners
            if runner.host is not None
            for fault in runner.host.active.values()
        ]
        health = Health(HealthState.DEGRADED, "; ".join(active)) if active else None
        if health is None:
            health = Health(HealthState.RUNNING)
        if health != self.health.value:
            self.health.value = health

    async def _supervise(
        self,
        runner: SubscriptionRunner,
        handle: RunningApp,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run one subscription; if it fails once running, fail the app and shut down the rest."""
        try:
            await runner.run(task_status=task_status)
        except Exception as exc:
            if not runner.started:
                raise
            cause = _single_cause(exc)
            # A typed error of ours names its cause and where (a corrupt file, a lost lock): one
            # line, the traceback at DEBUG. Anything else is a crash, whose traceback belongs in
            # the log.
            expected = isinstance(cause, TrioStreamsError)
            self.logger.error(
                "%s: subscription %r failed: %s",
                self.name,
                runner.label,
                describe(cause),
                exc_info=None if expected else cause,
            )
            if expected:
                self.logger.debug(
                    "%s: the traceback of %r's failure", self.name, runner.label, exc_info=cause
                )
            failure = TrioStreamsError(f"subscription {runner.label!r} failed: {cause!r}")
            failure.__cause__ = cause
            handle._fail(failure)

    async def _stop_when_finished(self, handle: RunningApp) -> None:
        await handle.wait_finished()
        if handle._failure is None and not handle._stop.is_set():
            self.logger.info("%s: every subscription has ended; stopping", self.name)
        handle.request_stop()

    async def _drain(self, runners: Sequence[SubscriptionRunner], grace: float) -> None:
        for runner in runners:
            runner.stop_reading()
        with trio.move_on_after(grace) as draining:
            for runner in runners:
                await runner.finished.wait()
        if draining.cancelled_caught:
            left = sum(runner.channel.outstanding for runner in runners)
            self.logger.warning(
                "%s: drain did not finish within %ss; abandoning %d delivery(ies)",
                self.name,
                grace,
                left,
            )
            for runner in runners:
                runner.abandon()
            for runner in runners:
                await runner.finished.wait()

    async def _run_hooks(self, stage: str) -> None:
        for hook in self._hooks[stage]:
            try:
                result = _call_with_app(hook, self)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                # Says where it came from in a one-line report; the type stays the hook's.
                exc.add_note(f"in the {stage} hook {_name_of(hook)}")
                raise
            except BaseException as exc:
                stop = escaped(exc, f"the {stage} hook {_name_of(hook)}")
                if stop is None:
                    raise
                raise stop from exc


def check_app_name(name: object) -> str:
    """``name`` as an app's name: it goes into logger names, retry targets
    (``<app>/<subscription>``, ``#n``, ``@process``) and Redis consumer names
    (``<host>:<app>/<subscription>:<slot>``), so it must be printable, without whitespace and
    without the characters that separate those parts."""
    if not isinstance(name, str):
        raise ConfigurationError(f"App() takes a name (a str), not {name!r}")
    if not name.strip():
        raise ConfigurationError(f"App() needs a name, not {name!r}: e.g. App('orders')")
    bad = sorted({c for c in name if c in _NAME_SEPARATORS or c.isspace() or not c.isprintable()})
    if bad:
        raise ConfigurationError(
            f"App({name!r}): an app's name cannot hold {', '.join(repr(c) for c in bad)}; it is "
            "part of retry targets (<app>/<subscription>) and consumer names "
            "(<host>:<app>/<subscription>:<slot>): use letters, digits, '.', '_' or '-'"
        )
    return name


#: The characters that separate the parts of retry targets and consumer names.
_NAME_SEPARATORS = frozenset("/:#@")


def check_shutdown_timeout(value: object) -> float:
    """``value`` as a drain bound in seconds: a number >= 0 (``inf``: no bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"shutdown_timeout takes seconds, not {value!r}")
    if math.isnan(value) or value < 0:
        raise ConfigurationError(f"shutdown_timeout must be >= 0 seconds, got {value!r}")
    return float(value)


@dataclass(slots=True)
class _SignalledRun:
    """What the signal watcher of a standalone run (``App.run``) knows: how many signals
    came, whether one cut the run short, and whether ``serve`` is over."""

    nursery: trio.Nursery
    received: int = 0
    cut_short: bool = False
    over: bool = False


def _did_not_start(name: str, error: Exception) -> AppFailed:
    if isinstance(error, BaseExceptionGroup):
        return AppFailed(f"app {name!r} did not start: {len(leaves(error))} errors")
    return AppFailed(f"app {name!r} did not start: {describe(error)}")


def _name_of(hook: Hook) -> str:
    name = getattr(hook, "__qualname__", None) or getattr(hook, "__name__", None)
    return str(name) if name else repr(hook)


def _check_lifespan(factory: Lifespan) -> Lifespan:
    if not callable(factory):
        raise ConfigurationError(
            f"lifespan takes a function returning an async context manager, not {factory!r}"
        )
    return factory


def _call_with_app(fn: Callable[..., Any], app: App) -> Any:
    """``fn(app)`` if ``fn`` takes an argument, else ``fn()`` (hooks, lifespans, tasks)."""
    return fn(app) if inspect.signature(fn).parameters else fn()


def _only_cancelled(error: BaseException) -> bool:
    """True for a cancellation, or a group holding nothing but cancellations."""
    if isinstance(error, BaseExceptionGroup):
        return error.split(trio.Cancelled)[1] is None
    return isinstance(error, trio.Cancelled)


def _single_cause(error: BaseException) -> BaseException:
    """The one error inside nested exception groups, or the group itself if there are more."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def connect_broker(broker: Broker) -> AbstractAsyncContextManager[Transport]:
    """The default way a run connects a broker: its own transport."""
    return broker.connect()
