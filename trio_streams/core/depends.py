"""Dependencies: handler parameters filled by functions of yours, ``Depends(fn)``.

What FastAPI and FastDepends users expect, planned once when the handler is mounted and solved
per delivery on the hot path:

- ``fn`` may be a function, an ``async def``, a generator or an async generator (``yield`` once:
  the value yielded is what the handler gets, the code after it is the cleanup), a class or
  another callable;
- ``fn``'s own parameters are filled like a handler's: ``Context``, ``Headers``, ``Position``,
  ``Seeker``, ``Pipeline``, ``Header(...)``, other ``Depends(...)`` (nesting), a parameter
  annotated with the handler's payload type (the decoded payload), or a default. A dependency
  with a single unannotated parameter gets the ``Context`` (the ``fn(ctx)`` form). Anything else
  is refused at mount with a ``ConfigurationError`` naming the handler, the dependency and the
  parameter, as is a cycle;
- within one delivery a dependency used several times in the tree is called once, and its value
  shared, unless ``Depends(fn, use_cache=False)``;
- cleanups run after the delivery has been settled (acked, retried, dead-lettered), last entered
  first, and see the exception the handler (or a dependency, or the decode) raised, thrown in at
  their ``yield`` as FastAPI does; with no exception they resume normally. A cleanup's own
  failure is logged and changes nothing: the delivery is already settled;
- a delivery cancelled (shutdown cutting a handler short) still runs its cleanups: each gets
  ``trio.Cancelled`` thrown in at its ``yield`` and runs shielded from the cancellation for at
  most ``CLEANUP_TIMEOUT`` seconds, then is cancelled itself (logged);
- ``app.test(dependency_overrides={fn: replacement})`` plans every handler whose tree uses ``fn``
  again with ``replacement`` in its place (checked the same way), when the test app starts.

In a batch handler a dependency is solved once per batch, and cleaned up once the whole batch has
been settled; its parameters may be other dependencies, ``list[Context]`` (the batch's contexts)
and the payload type (``list[T]``, the batch).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

import trio

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .handler import Handler

#: What users meet; the rest (planning, solving, scopes) is the dispatcher's and the harness's.
__all__ = ["CLEANUP_TIMEOUT", "Depends"]

#: Seconds a dependency's cleanup may run, shielded from cancellation, before it is cut short.
CLEANUP_TIMEOUT = 5.0

_EMPTY = inspect.Parameter.empty


@final
@dataclass(frozen=True, slots=True)
class Depends:
    """Marks a parameter as filled by ``dependency``: ``Annotated[Db, Depends(get_db)]``.

    ``dependency``'s own parameters are filled as a handler's are (see
    :mod:`trio_streams.core.depends`).
    ``use_cache=False`` calls it afresh for this parameter instead of sharing the value it
    already has in this delivery.
    """

    dependency: Callable[..., Any]
    use_cache: bool = True


#: Fills a leaf parameter: (delivery, context) -> value. In a batch, (None, list of contexts).
Leaf = Callable[[Any, Any], Any]
#: Builds the leaf for a parameter that is not a ``Depends``: (where, parameter, annotation).
LeafFor = Callable[[str, inspect.Parameter, Any], tuple[Leaf, bool]]

_LEAF = 0
_CALL = 1
_PAYLOAD = 2
Source = tuple[int, Any]

_SYNC = 0
_ASYNC = 1
_GENERATOR = 2
_ASYNC_GENERATOR = 3


class _Call:
    """One dependency in a handler's tree, as planned at mount."""

    __slots__ = ("fn", "key", "keyword", "kind", "name", "positional", "use_cache")

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        kind: int,
        key: Callable[..., Any],
        use_cache: bool,
        positional: tuple[Source, ...],
        keyword: tuple[tuple[str, Source], ...],
    ) -> None:
        self.name = name
        self.fn = fn
        self.kind = kind
        self.key = key
        self.use_cache = use_cache
        self.positional = positional
        self.keyword = keyword


_MISSING: Any = object()


class DependencyScope:
    """One delivery's (or batch's) dependency values and the cleanups still to run."""

    __slots__ = ("_exits", "error", "values")

    def __init__(self) -> None:
        self.values: dict[Callable[..., Any], Any] = {}
        self._exits: list[tuple[bool, Any, str]] | None = None
        #: What the handler, a dependency or the decode raised; the cleanups see it.
        self.error: BaseException | None = None

    def _push(self, is_async: bool, manager: Any, name: str) -> None:
        if self._exits is None:
            self._exits = []
        self._exits.append((is_async, manager, name))

    async def aclose(self, error: BaseException | None, logger: logging.Logger, label: str) -> None:
        """Run the cleanups, last entered first, with ``error`` thrown in at their ``yield``.

        Each async cleanup is shielded from cancellation for at most ``CLEANUP_TIMEOUT`` s, so a
        delivery cancelled at shutdown still releases what its dependencies hold. Never raises a
        cleanup's failure (it is logged); the caller re-raises ``error`` if it was propagating.
        """
        exits, self._exits = self._exits, None
        if not exits:
            return
        info = (None, None, None) if error is None else (type(error), error, error.__traceback__)
        while exits:
            is_async, manager, name = exits.pop()
            if not is_async:
                try:
                    manager.__exit__(*info)
                except Exception as exc:  # noqa: BLE001 - the delivery is settled; log and go on
                    if exc is not error:
                        _cleanup_failed(logger, label, name, exc)
                continue
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + CLEANUP_TIMEOUT
                try:
                    await manager.__aexit__(*info)
                except trio.Cancelled as exc:
                    if exc is not error:
                        raise  # our own deadline (the scope is shielded): the scope catches it
                except Exception as exc:  # noqa: BLE001 - the delivery is settled; log and go on
                    if exc is not error:
                        _cleanup_failed(logger, label, name, exc)
            if scope.cancelled_caught:
                logger.error(
                    "%s: the cleanup of dependency %s did not finish within %s s: cancelled",
                    label,
                    name,
                    CLEANUP_TIMEOUT,
                )


def _cleanup_failed(logger: logging.Logger, label: str, name: str, exc: BaseException) -> None:
    logger.error(
        "%s: the cleanup of dependency %s failed (the delivery was settled already)",
        label,
        name,
        exc_info=exc,
    )


class Arguments:
    """A handler's parameters after the payload, when at least one of them is a dependency."""

    __slots__ = ("plain", "sources")

    def __init__(self, sources: tuple[Source, ...]) -> None:
        self.sources = sources
        #: The same values solved without a scope, when no dependency in the tree is a
        #: generator (None otherwise): planned once, here, at mount.
        self.plain = PlainArguments.plan(sources)

    async def solve(
        self, delivery: Any, context: Any, payload: Any, scope: DependencyScope
    ) -> list[Any]:
        """The values, in order. A dependency's exception propagates (the failure policy runs);
        what was entered before it is in ``scope``, to clean up."""
        values = []
        for code, target in self.sources:
            if code == _LEAF:
                values.append(target(delivery, context))
            else:
                values.append(await _solve(target, delivery, context, payload, scope))
        return values


async def _solve(
    call: _Call, delivery: Any, context: Any, payload: Any, scope: DependencyScope
) -> Any:
    """``call``'s value in this delivery: cached, or called (and entered, for a generator)."""
    if call.use_cache:
        value = scope.values.get(call.key, _MISSING)
        if value is not _MISSING:
            return value
    args = []
    for code, target in call.positional:
        if code == _LEAF:
            args.append(target(delivery, context))
        elif code == _PAYLOAD:
            args.append(payload)
        else:
            args.append(await _solve(target, delivery, context, payload, scope))
    kwargs = {}
    for name, (code, target) in call.keyword:
        if code == _LEAF:
            kwargs[name] = target(delivery, context)
        elif code == _PAYLOAD:
            kwargs[name] = payload
        else:
            kwargs[name] = await _solve(target, delivery, context, payload, scope)
    kind = call.kind
    if kind == _SYNC:
        value = call.fn(*args, **kwargs)
    elif kind == _ASYNC:
        value = await call.fn(*args, **kwargs)
    elif kind == _GENERATOR:
        manager = call.fn(*args, **kwargs)
        value = manager.__enter__()
        scope._push(False, manager, call.name)
    else:
        manager = call.fn(*args, **kwargs)
        value = await manager.__aenter__()
        scope._push(True, manager, call.name)
    if call.use_cache:
        scope.values[call.key] = value
    return value


_STEP_LEAF = 0
_STEP_SYNC = 1
_STEP_ASYNC = 2
#: A step's argument: the payload (None) or the value a step before it left (its index).
_Ref = int | None


class PlainArguments:
    """What :meth:`Arguments.solve` returns, for a tree of plain dependencies only (functions
    and ``async def``, no generator): nothing to clean up, so no :class:`DependencyScope`.

    The tree is planned once into a straight list of steps, in the order ``solve`` calls
    them: each leaf extractor and each dependency call, a dependency's parameters before it,
    left to right. A cached dependency (``use_cache=True``) is a step the first time it is
    met; every later use reads that step's value, as ``solve`` reads its scope's cache (and a
    ``use_cache=False`` use is a step each time, stored in no cache, as there). So every
    function is called as often, in the same order, with the same arguments, and the first
    exception stops the solve where ``solve``'s would.

    :meth:`solve_now` when no step awaits (``awaits`` False): no coroutine at all;
    :meth:`solve` otherwise. A cancellation while an ``async def`` dependency runs goes on as
    it is, as in ``solve``; nothing was entered that needs leaving.
    """

    __slots__ = ("awaits", "results", "steps")

    def __init__(
        self,
        steps: tuple[tuple[int, Any, tuple[_Ref, ...], tuple[tuple[str, _Ref], ...]], ...],
        results: tuple[int, ...],
    ) -> None:
        self.steps = steps
        #: The step whose value each handler parameter after the payload gets.
        self.results = results
        self.awaits = any(kind == _STEP_ASYNC for kind, _, _, _ in steps)

    @classmethod
    def plan(cls, sources: tuple[Source, ...]) -> PlainArguments | None:
        """The plan of ``sources``, or None if a generator dependency is in the tree."""
        steps: list[tuple[int, Any, tuple[_Ref, ...], tuple[tuple[str, _Ref], ...]]] = []
        cached: dict[Callable[..., Any], int] = {}

        def leaf(extract: Leaf) -> int:
            steps.append((_STEP_LEAF, extract, (), ()))
            return len(steps) - 1

        def ref(code: int, target: Any) -> _Ref:
            if code == _LEAF:
                return leaf(target)
            if code == _PAYLOAD:
                return None
            return call(target)

        def call(node: _Call) -> int:
            if node.use_cache and node.key in cached:
                return cached[node.key]
            if node.kind not in (_SYNC, _ASYNC):
                raise _HasGenerator
            positional = tuple(ref(code, target) for code, target in node.positional)
            keyword = tuple((name, ref(code, target)) for name, (code, target) in node.keyword)
            steps.append(
                (_STEP_SYNC if node.kind == _SYNC else _STEP_ASYNC, node.fn, positional, keyword)
            )
            index = len(steps) - 1
            if node.use_cache:
                cached[node.key] = index
            return index

        try:
            results = tuple(
                leaf(target) if code == _LEAF else call(target) for code, target in sources
            )
        except _HasGenerator:
            return None
        return cls(tuple(steps), results)

    def solve_now(self, delivery: Any, context: Any, payload: Any) -> list[Any]:
        """The values, in order, when no step awaits (``awaits`` is False)."""
        values: list[Any] = []
        append = values.append
        for kind, fn, positional, keyword in self.steps:
            if kind == _STEP_LEAF:
                append(fn(delivery, context))
                continue
            args = [payload if r is None else values[r] for r in positional]
            if keyword:
                kwargs = {name: payload if r is None else values[r] for name, r in keyword}
                append(fn(*args, **kwargs))
            else:
                append(fn(*args))
        return [values[r] for r in self.results]

    async def solve(self, delivery: Any, context: Any, payload: Any) -> list[Any]:
        """The values, in order; some step awaits."""
        values: list[Any] = []
        append = values.append
        for kind, fn, positional, keyword in self.steps:
            if kind == _STEP_LEAF:
                append(fn(delivery, context))
                continue
            args = [payload if r is None else values[r] for r in positional]
            kwargs = {name: payload if r is None else values[r] for name, r in keyword}
            value = fn(*args, **kwargs)
            append(await value if kind == _STEP_ASYNC else value)
        return [values[r] for r in self.results]


class _HasGenerator(Exception):
    """Planning met a generator dependency: the tree needs a scope (``PlainArguments.plan``)."""


class Planner:
    """Plans one handler's dependency trees (at mount): checks every parameter, detects cycles,
    applies overrides, and records which dependencies the handler uses."""

    def __init__(
        self,
        handler: str,
        leaf_for: LeafFor,
        payload_type: Any,
        overrides: Mapping[Callable[..., Any], Callable[..., Any]] | None = None,
    ) -> None:
        self._handler = handler
        self._leaf_for = leaf_for
        self._payload_type = payload_type
        self._overrides = overrides or {}
        #: Every dependency named in the tree (before overrides), for ``app.test`` to check.
        self.used: set[Callable[..., Any]] = set()
        #: Every leaf extractor in the trees (the handler needs a Context if one takes it...).
        self.leaves: list[Leaf] = []
        self.needs_context = False

    @staticmethod
    def leaf(extract: Leaf) -> Source:
        """The source of a handler parameter filled by an extractor (not a dependency)."""
        return (_LEAF, extract)

    def source(self, marker: Depends, where: str) -> Source:
        """The source of a handler parameter marked ``Depends``."""
        return (_CALL, self._plan(marker, where, ()))

    def _plan(self, marker: Depends, where: str, chain: tuple[Callable[..., Any], ...]) -> _Call:
        original = marker.dependency
        if not callable(original):
            raise ConfigurationError(f"{where}: Depends() takes a callable, not {original!r}")
        self.used.add(original)
        fn = self._overrides.get(original, original)
        name = _name_of(fn)
        if fn in chain:
            cycle = " -> ".join(_name_of(f) for f in (*chain, fn))
            raise ConfigurationError(f"handler {self._handler}: dependency cycle {cycle}")
        here = f"handler {self._handler}, dependency {name}"
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{where}: cannot inspect the dependency {fn!r}") from exc
        hints = _hints_of(fn, here)
        params = [
            p
            for p in signature.parameters.values()
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        positional: list[Source] = []
        keyword: list[tuple[str, Source]] = []
        for param in params:
            source = self._param(param, hints, here, (*chain, fn), alone=len(params) == 1)
            if param.kind is inspect.Parameter.KEYWORD_ONLY:
                keyword.append((param.name, source))
            else:
                positional.append(source)
        kind = _kind_of(fn)
        call_fn: Callable[..., Any] = fn
        if kind == _GENERATOR:
            call_fn = contextlib.contextmanager(fn)
        elif kind == _ASYNC_GENERATOR:
            call_fn = contextlib.asynccontextmanager(fn)
        return _Call(name, call_fn, kind, fn, marker.use_cache, tuple(positional), tuple(keyword))

    def _param(
        self,
        param: inspect.Parameter,
        hints: dict[str, Any],
        here: str,
        chain: tuple[Callable[..., Any], ...],
        *,
        alone: bool,
    ) -> Source:
        where = f"{here}, parameter {param.name!r}"
        annotation = hints.get(param.name, _EMPTY)
        marker = _depends_marker(param, annotation)
        if marker is not None:
            return (_CALL, self._plan(marker, where, chain))
        bare = _strip_annotated(annotation)
        if annotation is not _EMPTY and bare == self._payload_type and _no_marker(annotation):
            return (_PAYLOAD, None)
        if annotation is _EMPTY and param.default is _EMPTY and alone:
            annotation = _context_type()  # the fn(ctx) form
        leaf, wants_context = self._leaf_for(where, param, annotation)
        self.leaves.append(leaf)
        self.needs_context = self.needs_context or wants_context
        return (_LEAF, leaf)


def check_overrides(
    handlers: Sequence[Handler], overrides: Mapping[Callable[..., Any], Callable[..., Any]]
) -> None:
    """Refuse overrides that cannot work, before anything runs: a replacement whose parameters
    cannot be filled (checked as at mount) or a dependency no handler uses (a typo, a stale
    test). Raises ``ConfigurationError``."""
    for original, replacement in overrides.items():
        if not callable(original) or not callable(replacement):
            raise ConfigurationError(
                f"dependency_overrides maps a dependency to its replacement, both callables; "
                f"got {original!r}: {replacement!r}"
            )
    used: set[Callable[..., Any]] = set()
    for handler in handlers:
        used.update(handler.depends_on)
        used.update(handler.overridden(overrides).depends_on)  # replacements' own trees too
    unused = [_name_of(original) for original in overrides if original not in used]
    if unused:
        raise ConfigurationError(f"dependency_overrides: no handler depends on {', '.join(unused)}")


def _context_type() -> Any:
    from .context import Context

    return Context


def _depends_marker(param: inspect.Parameter, annotation: Any) -> Depends | None:
    if isinstance(param.default, Depends):
        return param.default
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in typing.get_args(annotation)[1:]:
            if isinstance(meta, Depends):
                return meta
    return None


def _no_marker(annotation: Any) -> bool:
    """True unless the annotation carries metadata (a ``Header(...)``) that says otherwise."""
    return typing.get_origin(annotation) is not typing.Annotated


def _strip_annotated(annotation: Any) -> Any:
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", repr(fn)))


def _hints_of(fn: Any, here: str) -> dict[str, Any]:
    target = inspect.unwrap(fn)
    if isinstance(target, functools.partial):
        target = target.func
    if inspect.isclass(target):
        target = target.__init__
    elif not inspect.isroutine(target):
        target = type(target).__call__
    try:
        return typing.get_type_hints(target, include_extras=True)
    except NameError as exc:
        raise ConfigurationError(f"{here}: cannot resolve an annotation: {exc}") from exc
    except TypeError:
        return {}


def _kind_of(fn: Any) -> int:
    target = inspect.unwrap(fn)
    if inspect.isclass(target):
        return _SYNC
    candidates = [target]
    if not inspect.isroutine(target) and not isinstance(target, functools.partial):
        candidates.append(getattr(target, "__call__", None))  # noqa: B004 - a callable object
    for candidate in candidates:
        if inspect.isasyncgenfunction(candidate):
            return _ASYNC_GENERATOR
        if inspect.isgeneratorfunction(candidate):
            return _GENERATOR
        if inspect.iscoroutinefunction(candidate):
            return _ASYNC
    return _SYNC
