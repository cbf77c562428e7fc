"""Turn a handler's signature into the calls that feed it, once, at mount time.

The first parameter is the payload, decoded by its annotation (see ``codec``). Every other
parameter is filled by what its annotation or default asks for:

- ``Context`` — the delivery's context (headers, position, attempt, publish, seeker);
- ``Annotated[T, Header("name")]`` or ``= Header("name")`` — one header, converted to ``T``;
  a missing header fails decoding unless the parameter has a default or is optional;
- ``Headers`` — the producer's headers as a read-only mapping (as ``ctx.headers``: without
  the retry count and target a retry copy carries);
- ``Position`` — where the message is; ``Seeker`` — the subscription's seek handle;
- ``Annotated[T, Depends(fn)]`` or ``= Depends(fn)`` — a dependency: ``fn`` sync or async, a
  function or a generator with cleanup, its own parameters filled the same way (see ``depends``).

A batch handler (``batch=n``) takes ``list[T]`` first and may take ``list[Context]`` and
dependencies (solved once per batch).
Anything else is refused with a ``ConfigurationError`` naming the parameter, when the handler is
mounted, not when the first message arrives.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

from .codec import DecodeError, Decoder, decoder_for
from .context import Context
from .delivery import Delivery, producer_headers
from .depends import Arguments, DependencyScope, Depends, Planner
from .driver import Seeker
from .errors import ConfigurationError
from .pipeline import Pipeline
from .positions import Position

__all__ = ["UNDECODED", "Depends", "Handler", "Header", "Headers", "analyse"]

#: Annotate a parameter ``Headers`` to receive every header of the delivery.
Headers = Mapping[str, str]

_EMPTY = inspect.Parameter.empty
#: Passed as ``message`` when the payload is still to be decoded.
UNDECODED: Any = object()


@final
@dataclass(frozen=True, slots=True)
class Header:
    """Marks a parameter as one header's value: ``Annotated[int, Header("x-count")]``.

    ``name`` defaults to the parameter's name.
    """

    name: str | None = None


#: Fills one argument: (delivery, context or None) -> value.
_Extractor = Callable[[Delivery, Context | None], Any]


@dataclass(frozen=True, slots=True)
class Handler:
    """A mounted handler: the function and how to build its arguments from a delivery."""

    fn: Callable[..., Awaitable[Any]]
    name: str
    payload_type: Any
    decode: Decoder
    is_batch: bool
    needs_context: bool
    #: The handler takes a ``Seeker`` parameter: its source must be seekable.
    seeks: bool
    #: The handler takes a ``Pipeline`` parameter: its subscription needs a pipeline window.
    pipelines: bool
    #: Extractors for the parameters after the payload, in order (without dependencies).
    extractors: tuple[_Extractor, ...]
    #: With at least one ``Depends`` parameter: how to solve every parameter after the payload
    #: (``extractors`` is then empty); None otherwise, so handlers without pay nothing.
    dependencies: Arguments | None = None
    #: Every dependency the handler's trees name (before overrides).
    depends_on: frozenset[Callable[..., Any]] = frozenset()

    async def arguments(
        self,
        delivery: Delivery,
        context: Context | None,
        message: Any = UNDECODED,
        scope: DependencyScope | None = None,
    ) -> list[Any]:
        """Decode the payload (unless given) and fill the other parameters. Raises
        ``DecodeError``; a dependency's exception propagates. With dependencies, ``scope`` holds
        their values and cleanups (the caller closes it once the delivery is settled)."""
        payload = self.decode(delivery.payload) if message is UNDECODED else message
        dependencies = self.dependencies
        if dependencies is not None:
            assert scope is not None, "a handler with dependencies needs a DependencyScope"
            return [payload, *await dependencies.solve(delivery, context, payload, scope)]
        args = [payload]
        for extract in self.extractors:
            args.append(extract(delivery, context))
        return args

    def overridden(self, overrides: Mapping[Callable[..., Any], Callable[..., Any]]) -> Handler:
        """This handler planned again with ``overrides`` (dependency -> replacement) in place,
        checked as at mount; itself when it uses none of them."""
        if not self.depends_on.intersection(overrides):
            return self
        return analyse(self.fn, batch=self.is_batch, overrides=overrides)


def analyse(
    fn: Callable[..., Awaitable[Any]],
    *,
    batch: bool = False,
    overrides: Mapping[Callable[..., Any], Callable[..., Any]] | None = None,
) -> Handler:
    """Inspect ``fn`` and build its ``Handler``; raises ``ConfigurationError`` if it cannot work.

    ``overrides`` replaces dependencies (``app.test(dependency_overrides=...)``).
    """
    target = inspect.unwrap(fn)
    name = getattr(target, "__qualname__", repr(fn))
    if not inspect.iscoroutinefunction(target):
        raise ConfigurationError(f"handler {name} must be an `async def` function")
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except NameError as exc:
        raise ConfigurationError(f"handler {name}: cannot resolve an annotation: {exc}") from exc
    params = list(inspect.signature(target).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigurationError(f"handler {name} needs a first parameter for the payload")

    payload = params[0]
    payload_type = _strip_annotated(hints.get(payload.name, bytes))
    if batch:
        if typing.get_origin(payload_type) not in (list, Sequence):
            raise ConfigurationError(
                f"batch handler {name}: the first parameter must be list[T], not {payload_type!r}"
            )
        (item_type,) = typing.get_args(payload_type) or (bytes,)
        decode = _checked_decoder(name, item_type)
    else:
        decode = _checked_decoder(name, payload_type)

    def leaf_for(where: str, param: inspect.Parameter, annotation: Any) -> tuple[_Extractor, bool]:
        return _leaf_for(where, param, annotation, batch=batch)

    planner = Planner(name, leaf_for, payload_type, overrides)
    extractors: list[_Extractor] = []
    sources = []
    needs_context = False
    has_dependencies = False
    for param in params[1:]:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigurationError(f"handler {name}: *{param.name} cannot be filled")
        where = f"handler {name}, parameter {param.name!r}"
        annotation = hints.get(param.name, _EMPTY)
        marker = _marker(param, annotation)
        if isinstance(marker, Depends):
            sources.append(planner.source(marker, where))
            has_dependencies = True
            continue
        extract, wants_context = _leaf_for(where, param, annotation, batch=batch)
        extractors.append(extract)
        sources.append(Planner.leaf(extract))
        needs_context = needs_context or wants_context
    leaves = [*extractors, *planner.leaves]
    return Handler(
        fn=fn,
        name=name,
        payload_type=payload_type,
        decode=decode,
        is_batch=batch,
        needs_context=needs_context or planner.needs_context,
        seeks=_seeker in leaves,
        pipelines=_pipeline in leaves,
        extractors=() if has_dependencies else tuple(extractors),
        dependencies=Arguments(tuple(sources)) if has_dependencies else None,
        depends_on=frozenset(planner.used),
    )


def _checked_decoder(name: str, annotation: Any) -> Decoder:
    try:
        return decoder_for(annotation)
    except TypeError as exc:
        raise ConfigurationError(f"handler {name}: {exc}") from exc


def _strip_annotated(annotation: Any) -> Any:
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def _marker(param: inspect.Parameter, annotation: Any) -> Header | Depends | None:
    if isinstance(param.default, Header | Depends):
        return param.default
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in typing.get_args(annotation)[1:]:
            if isinstance(meta, Header | Depends):
                return meta
    return None


def _leaf_for(
    where: str, param: inspect.Parameter, annotation: Any, *, batch: bool
) -> tuple[_Extractor, bool]:
    """(extractor, does it need the Context) for a parameter that is not a dependency."""
    marker = _marker(param, annotation)
    bare = _strip_annotated(annotation)

    if batch:
        if typing.get_origin(bare) in (list, Sequence) and typing.get_args(bare) == (Context,):
            return _batch_contexts, True
        raise ConfigurationError(
            f"{where}: a batch handler takes list[T], and optionally list[Context] and "
            "Depends(...), nothing else"
        )
    if isinstance(marker, Header):
        default = param.default if not isinstance(param.default, Header) else _EMPTY
        return _header(marker.name or param.name, bare, default, where), False
    if bare is Context:
        return _context, True
    if bare is Seeker:
        return _seeker, True
    if bare is Pipeline:
        return _pipeline, True
    if bare is Position or bare == Position | None:
        return _position, False
    if bare in (Headers, Mapping, dict[str, str]):
        return _headers, False
    if param.default is not _EMPTY:
        default = param.default
        return (lambda delivery, context: default), False
    raise ConfigurationError(
        f"{where}: cannot tell what to pass. Annotate it Context, Headers, Position, Seeker, "
        "Pipeline, Annotated[T, Header(...)] or Annotated[T, Depends(...)], or give it a default"
    )


def _context(delivery: Delivery, context: Context | None) -> Context | None:
    return context


def _batch_contexts(delivery: Any, contexts: Any) -> Any:
    """In a batch, leaves get (None, the batch's contexts)."""
    return contexts


def _seeker(delivery: Delivery, context: Context | None) -> Seeker:
    assert context is not None
    return context.seeker


def _pipeline(delivery: Delivery, context: Context | None) -> Pipeline:
    assert context is not None
    return context.pipeline


def _position(delivery: Delivery, context: Context | None) -> Position | None:
    return delivery.position


def _headers(delivery: Delivery, context: Context | None) -> Mapping[str, str]:
    return producer_headers(delivery.headers)  # as ctx.headers: without the retry headers


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _header(header: str, annotation: Any, default: Any, where: str) -> _Extractor:
    optional = False
    if typing.get_origin(annotation) in (typing.Union, __import__("types").UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(options) < len(typing.get_args(annotation))
        if len(options) != 1:
            raise ConfigurationError(f"{where}: a header converts to one type, not {annotation!r}")
        annotation = options[0]
    convert = _header_converter(annotation, where)
    missing_ok = optional or default is not _EMPTY
    fallback = None if default is _EMPTY else default

    def extract(delivery: Delivery, context: Context | None) -> Any:
        raw = delivery.headers.get(header)
        if raw is None:
            if missing_ok:
                return fallback
            raise DecodeError(
                "the message has no such header", stream=delivery.stream, header=header
            )
        try:
            return convert(raw)
        except ValueError as exc:
            raise DecodeError(str(exc), stream=delivery.stream, header=header) from None

    return extract


def _header_converter(annotation: Any, where: str) -> Callable[[str], Any]:
    if annotation is _EMPTY or annotation is str:
        return str
    if annotation is int:
        return int
    if annotation is float:
        return float
    if annotation is bytes:
        return lambda raw: raw.encode("utf-8", "surrogateescape")
    if annotation is bool:

        def to_bool(raw: str) -> bool:
            lowered = raw.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError(f"{raw!r} is not a boolean")

        return to_bool
    raise ConfigurationError(f"{where}: headers convert to str, int, float, bool or bytes")
