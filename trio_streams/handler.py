"""Turn a handler's signature into the calls that feed it, once, at mount time.

The first parameter is the payload, decoded by its annotation (see ``codec``). Every other
parameter is filled by what its annotation or default asks for:

- ``Context`` — the delivery's context (headers, position, attempt, publish, seeker);
- ``Annotated[T, Header("name")]`` or ``= Header("name")`` — one header, converted to ``T``;
  a missing header fails decoding unless the parameter has a default or is optional;
- ``Headers`` — all headers as a read-only mapping;
- ``Position`` — where the message is; ``Seeker`` — the subscription's seek handle;
- ``Annotated[T, Depends(fn)]`` or ``= Depends(fn)`` — your own extractor, ``fn(ctx)`` or
  ``fn()``, sync or async.

A batch handler (``batch=n``) takes ``list[T]`` first and may take ``list[Context]``.
Anything else is refused with a ``ConfigurationError`` naming the parameter, when the handler is
mounted, not when the first message arrives.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .codec import DecodeError, Decoder, decoder_for
from .context import Context
from .delivery import Delivery
from .driver import Seeker
from .errors import ConfigurationError
from .pipeline import Pipeline
from .positions import Position

__all__ = ["Depends", "Handler", "Header", "Headers", "analyse"]

#: Annotate a parameter ``Headers`` to receive every header of the delivery.
Headers = Mapping[str, str]

_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True, slots=True)
class Header:
    """Marks a parameter as one header's value: ``Annotated[int, Header("x-count")]``.

    ``name`` defaults to the parameter's name.
    """

    name: str | None = None


@dataclass(frozen=True, slots=True)
class Depends:
    """Marks a parameter as filled by ``extract(ctx)`` or ``extract()`` (sync or async)."""

    extract: Callable[..., Any]


#: Fills one argument: (delivery, context or None) -> value, possibly awaitable.
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
    #: Extractors for the parameters after the payload, in order, and which are awaitable.
    extractors: tuple[_Extractor, ...]
    awaitable: tuple[bool, ...]

    async def arguments(self, delivery: Delivery, context: Context | None) -> list[Any]:
        """Decode the payload and fill the other parameters. Raises ``DecodeError``."""
        args = [self.decode(delivery.payload)]
        for extract, is_async in zip(self.extractors, self.awaitable, strict=True):
            value = extract(delivery, context)
            args.append(await value if is_async else value)
        return args


def analyse(fn: Callable[..., Awaitable[Any]], *, batch: bool = False) -> Handler:
    """Inspect ``fn`` and build its ``Handler``; raises ``ConfigurationError`` if it cannot work."""
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

    extractors: list[_Extractor] = []
    awaitable: list[bool] = []
    needs_context = False
    seeks = False
    pipelines = False
    for param in params[1:]:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigurationError(f"handler {name}: *{param.name} cannot be filled")
        extract, is_async, wants_context = _extractor_for(name, param, hints, batch=batch)
        extractors.append(extract)
        awaitable.append(is_async)
        needs_context = needs_context or wants_context
        seeks = seeks or extract is _seeker
        pipelines = pipelines or extract is _pipeline
    return Handler(
        fn=fn,
        name=name,
        payload_type=payload_type,
        decode=decode,
        is_batch=batch,
        needs_context=needs_context,
        seeks=seeks,
        pipelines=pipelines,
        extractors=tuple(extractors),
        awaitable=tuple(awaitable),
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


def _extractor_for(
    name: str, param: inspect.Parameter, hints: dict[str, Any], *, batch: bool
) -> tuple[_Extractor, bool, bool]:
    """(extractor, is it awaitable, does it need the Context)."""
    annotation = hints.get(param.name, _EMPTY)
    marker = _marker(param, annotation)
    bare = _strip_annotated(annotation)
    where = f"handler {name}, parameter {param.name!r}"

    if batch:
        if typing.get_origin(bare) in (list, Sequence) and typing.get_args(bare) == (Context,):
            return _batch_contexts, False, True
        raise ConfigurationError(
            f"{where}: a batch handler takes list[T] and optionally list[Context], nothing else"
        )
    if isinstance(marker, Depends):
        return _depends(marker.extract, where)
    if isinstance(marker, Header):
        default = param.default if not isinstance(param.default, Header) else _EMPTY
        return _header(marker.name or param.name, bare, default, where), False, False
    if bare is Context:
        return _context, False, True
    if bare is Seeker:
        return _seeker, False, True
    if bare is Pipeline:
        return _pipeline, False, True
    if bare is Position or bare == Position | None:
        return _position, False, False
    if bare in (Headers, Mapping, dict[str, str]):
        return _headers, False, False
    if param.default is not _EMPTY:
        default = param.default
        return (lambda delivery, context: default), False, False
    raise ConfigurationError(
        f"{where}: cannot tell what to pass. Annotate it Context, Headers, Position, Seeker, "
        "Pipeline, Annotated[T, Header(...)] or Annotated[T, Depends(...)], or give it a default"
    )


def _context(delivery: Delivery, context: Context | None) -> Context | None:
    return context


def _batch_contexts(delivery: Delivery, context: Context | None) -> Any:
    raise AssertionError("batch contexts are filled by the batch dispatcher")


def _seeker(delivery: Delivery, context: Context | None) -> Seeker:
    assert context is not None
    return context.seeker


def _pipeline(delivery: Delivery, context: Context | None) -> Pipeline:
    assert context is not None
    return context.pipeline


def _position(delivery: Delivery, context: Context | None) -> Position | None:
    return delivery.position


def _headers(delivery: Delivery, context: Context | None) -> Mapping[str, str]:
    return delivery.headers


def _depends(extract: Callable[..., Any], where: str) -> tuple[_Extractor, bool, bool]:
    try:
        takes_context = bool(inspect.signature(extract).parameters)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}: cannot inspect the extractor {extract!r}") from exc
    is_async = inspect.iscoroutinefunction(inspect.unwrap(extract))
    if takes_context:
        return (lambda delivery, context: extract(context)), is_async, True
    return (lambda delivery, context: extract()), is_async, False


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
            raise DecodeError(f"missing header {header!r}", stream=delivery.stream)
        try:
            return convert(raw)
        except ValueError as exc:
            raise DecodeError(f"header {header!r}: {exc}", stream=delivery.stream) from None

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
