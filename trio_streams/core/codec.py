"""Payload encoding and decoding, driven by the handler's type annotations.

A handler's first parameter says what it wants: ``bytes`` (the payload as it arrived; also what
an unannotated parameter gets), ``str`` (UTF-8), JSON values (``dict``, ``list``, numbers,
``Any``…), a dataclass, a pydantic model (with the optional extra) or a msgspec Struct, and
inside those ``UUID``, ``Decimal``, ``datetime``/``date``/``time``/``timedelta``, enums, sets and
``bytes`` (base64), as msgspec encodes them. Decoders are built once per handler, at mount time,
so the hot path is a single call. A payload that does not fit raises ``DecodeError``, which names
the path inside the document (``$.items[2].qty``) and what was expected.

Where every part of the type is one msgspec decodes exactly as the general path converts it
(JSON values, dataclasses with generated ``__init__``s, msgspec Structs, enums, ``UUID``, dates
and times, containers and ``Optional`` of those), the decoder first tries a compiled
``msgspec.json.Decoder`` for the type, which parses and converts in one step. Whatever it
refuses goes through the general path, so what is accepted, what it becomes and the error a bad
payload gets are the general path's (a dataclass's ``__post_init__`` that refuses a payload
runs twice: once in each path).

Encoding is msgspec's JSON encoder (pydantic models through ``model_dump_json``, or
``model_dump(mode="json")`` when nested), so what a handler can decode it can also publish. A
value that cannot be encoded raises ``EncodeError`` naming the path of the part that cannot.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import msgspec

from .errors import TrioStreamsError
from .extras import importing

__all__ = ["DecodeError", "Decoder", "EncodeError", "decoder_for", "encode"]

Decoder = Callable[[bytes], Any]
#: Turns an already-parsed JSON value into the wanted type, or raises _Mismatch.
_Convert = Callable[[Any, str], Any]

_json_loads = msgspec.json.decode


class DecodeError(TrioStreamsError):
    """A payload, or a header (``header`` names it), could not be turned into what the
    handler asked for."""

    def __init__(
        self, reason: str, *, stream: str | None = None, header: str | None = None
    ) -> None:
        self.reason = reason
        self.stream = stream
        self.header = header
        where = f" (from {stream!r})" if stream else ""
        super().__init__(f"cannot {self.what}{where}: {reason}")

    @property
    def what(self) -> str:
        """What could not be read: ``decode payload`` or ``read header 'x-count'``."""
        return "decode payload" if self.header is None else f"read header {self.header!r}"

    def with_hint(self, hint: str) -> DecodeError:
        """The same error, its reason followed by ``hint`` (how to write such a message)."""
        return DecodeError(f"{self.reason}; {hint}", stream=self.stream, header=self.header)


class _Mismatch(Exception):
    def __init__(self, path: str, expected: str, got: Any) -> None:
        super().__init__(f"{path}: expected {expected}, got {_describe(got)}")


class _Refused(_Mismatch):
    """A value refused for a reason that is not a wrong type (a field left out, a nested
    model's own check): said as it is, since there is no value to show."""

    def __init__(self, path: str, reason: str) -> None:
        Exception.__init__(self, f"{path}: {reason}")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


# ---- decoding ----------------------------------------------------------------------------------


def decoder_for(annotation: Any) -> Decoder:
    """A decoder from payload bytes to ``annotation``. Raises TypeError for unsupported types."""
    if annotation is bytes:
        return _identity
    if annotation is bytearray:
        return bytearray
    if annotation is str:
        return _decode_utf8
    model_decoder = _model_decoder(annotation)
    if model_decoder is not None:
        return model_decoder
    general = _general_decoder(annotation)
    compiled = _compiled_decoder(annotation)
    if compiled is None:
        return general

    def decode_typed(payload: bytes) -> Any:
        try:
            return compiled(payload)
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return general(payload)  # refused: the general path decides, and words the error

    return decode_typed


def _general_decoder(annotation: Any) -> Decoder:
    """Parse JSON, then check and convert the value with ``_converter`` (the reference path,
    whose errors name the path inside the document)."""
    convert = _converter(annotation)

    def decode_json(payload: bytes) -> Any:
        try:
            value = _json_loads(payload)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise DecodeError(f"not valid JSON: {exc}") from None
        except RecursionError:
            raise DecodeError("JSON nested too deeply") from None
        try:
            return convert(value, "$")
        except _Mismatch as exc:
            raise DecodeError(str(exc)) from None
        except RecursionError:
            raise DecodeError("value nested too deeply") from None

    return decode_json


def _compiled_decoder(annotation: Any) -> Decoder | None:
    """A ``msgspec.json.Decoder(annotation).decode``, where msgspec decodes every value it
    accepts exactly as ``_converter`` converts it; None where it might not (``datetime``,
    ``Decimal``, pydantic models, unions other than ``Optional``, dataclasses with fields left
    out of ``__init__`` or an ``__init__`` of their own...)."""
    try:
        if not _compilable(annotation, set()):
            return None
    except TypeError:  # an unhashable part of an annotation: not one to compile
        return None
    try:
        return msgspec.json.Decoder(annotation).decode
    except (TypeError, ValueError):  # a type msgspec cannot build a decoder for
        return None


#: Leaves msgspec decodes from JSON as the general path converts them (``msgspec.convert``).
_COMPILED_LEAVES = frozenset({uuid.UUID, _dt.date, _dt.time})
_JSON_LEAVES = frozenset({type(None), None, bool, int, float, str, dict, list, Mapping, Sequence})


def _compilable(annotation: Any, seen: set[type]) -> bool:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _compilable(args[0], seen)
    if annotation is Any or annotation is object or annotation in _JSON_LEAVES:
        return True
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return len(options) == 1 and len(args) == 2 and _compilable(options[0], seen)
    if origin is typing.Literal:
        return all(type(a) in (str, int) or a is None for a in args)
    if origin in (list, Sequence, typing.Sequence, set, frozenset):
        return all(_compilable(a, seen) for a in args)
    if origin is tuple:
        return all(a is Ellipsis or _compilable(a, seen) for a in args)
    if origin in (dict, Mapping, typing.Mapping):
        return len(args) == 2 and args[0] is str and _compilable(args[1], seen)
    if not isinstance(annotation, type):
        return False
    if annotation in _COMPILED_LEAVES:
        return True
    if issubclass(annotation, enum.Flag):
        return False
    if issubclass(annotation, enum.Enum):
        return True
    if issubclass(annotation, msgspec.Struct):
        # A __post_init__ is user code: where the compiled decoder refused a payload, the
        # general path would run it a second time. Such types take the general path alone.
        return getattr(annotation, "__post_init__", None) is None
    if dataclasses.is_dataclass(annotation):
        return _compilable_dataclass(annotation, seen)
    return False


def _compilable_dataclass(cls: type, seen: set[type]) -> bool:
    if cls in seen:
        return True  # a type that refers back to itself: decided where it began
    seen.add(cls)
    if getattr(cls, "__post_init__", None) is not None:
        return False  # user code, run once: the general path alone (see Structs above)
    init = getattr(cls, "__init__", None)
    code = getattr(init, "__code__", None)
    if code is None or code.co_filename != "<string>":
        return False  # an __init__ of its own, which msgspec would not call
    declared: dict[str, Any] = cls.__dataclass_fields__  # type: ignore[attr-defined]
    if any(repr(f._field_type) == "_FIELD_INITVAR" for f in declared.values()):
        return False  # an InitVar: the general path cannot fill it either
    fields = dataclasses.fields(cls)  # the instance fields (no ClassVar)
    if not all(f.init for f in fields):
        return False  # a field left out of __init__: msgspec would set it from the payload
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable: the general path reports it
        return False
    return all(_compilable(hints[f.name], seen) for f in fields)


def _identity(payload: bytes) -> bytes:
    return payload


def _decode_utf8(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not valid UTF-8: {exc}") from None


def _model_decoder(annotation: Any) -> Decoder | None:
    """pydantic models and msgspec Structs decode with their own fast JSON parsers."""
    if not isinstance(annotation, type):
        return None
    for base in annotation.__mro__:
        module = base.__module__
        if module.startswith("pydantic") and base.__name__ == "BaseModel":
            return _pydantic_decoder(annotation)
        if module.startswith("msgspec") and base.__name__ == "Struct":
            return _msgspec_decoder(annotation)
    return None


def _pydantic_decoder(model: Any) -> Decoder:
    with importing("pydantic", "a pydantic model payload"):
        import pydantic

    validate = model.model_validate_json

    def decode(payload: bytes) -> Any:
        try:
            return validate(payload)
        except pydantic.ValidationError as exc:
            raise DecodeError(_pydantic_reason(exc)) from None

    return decode


def _pydantic_reason(exc: Any) -> str:
    parts = []
    for error in exc.errors()[:3]:
        loc = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        parts.append(f"{loc}: {error['msg']}")
    return "; ".join(parts)


def _msgspec_decoder(struct: Any) -> Decoder:
    import msgspec

    decoder = msgspec.json.Decoder(struct)

    def decode(payload: bytes) -> Any:
        try:
            return decoder.decode(payload)
        except msgspec.DecodeError as exc:
            raise DecodeError(str(exc)) from None

    return decode


@cache
def _converter(annotation: Any) -> _Convert:
    """Build (once per type) a function checking and converting a parsed JSON value."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _converter(args[0])
    convert = _plain_converter(annotation)
    if convert is None:
        convert = _generic_converter(origin, args)
    if convert is None and isinstance(annotation, type):
        convert = _class_converter(annotation)
    if convert is None:
        raise TypeError(f"trio-streams cannot decode a payload into {annotation!r}")
    return convert


def _plain_converter(annotation: Any) -> _Convert | None:
    """The converter of a JSON value's own type (``None``, ``bool``, ``int``, ``float``,
    ``str``, a bare ``dict`` or ``list``) or of anything at all, else None."""
    if annotation is None or annotation is type(None):
        return _exact(type(None), "null")
    if annotation is bool:
        return _exact(bool, "a boolean")
    if annotation is int:
        return _int
    if annotation is float:
        return _float
    if annotation is str:
        return _exact(str, "a string")
    if annotation is Any or annotation is object:
        return _passthrough
    if annotation in (dict, Mapping):
        return _exact(dict, "an object")
    if annotation in (list, Sequence):
        return _exact(list, "an array")
    return None


def _generic_converter(origin: Any, args: tuple[Any, ...]) -> _Convert | None:
    """The converter of a union, a literal or a parametrised container, else None."""
    if origin in (typing.Union, types.UnionType):
        return _union(args)
    if origin is typing.Literal:
        return _literal(args)
    if origin in (list, Sequence, typing.Sequence):
        return _list(_converter(args[0]) if args else _passthrough)
    if origin is tuple:
        return _tuple(args)
    if origin in (set, frozenset):
        return _set(origin, _converter(args[0]) if args else _passthrough)
    if origin in (dict, Mapping, typing.Mapping):
        return _dict(_converter(args[1]) if len(args) == 2 else _passthrough, args)
    return None


def _class_converter(annotation: type) -> _Convert | None:
    """The converter of a record class (a dataclass, an enum, a datetime, a msgspec leaf, a
    model with a decoder), else None."""
    if dataclasses.is_dataclass(annotation):
        return _dataclass(annotation)
    if issubclass(annotation, enum.Enum):
        return _enum(annotation)
    if annotation is _dt.datetime:
        return _datetime
    if annotation in _MSGSPEC_LEAVES:
        return _msgspec_leaf(annotation)
    if _model_decoder(annotation) is not None:
        return _model_from_value(annotation)
    return None


def _passthrough(value: Any, path: str) -> Any:
    return value


def _exact(kind: type, name: str) -> _Convert:
    def convert(value: Any, path: str) -> Any:
        if type(value) is not kind:
            raise _Mismatch(path, name, value)
        return value

    return convert


def _int(value: Any, path: str) -> int:
    if type(value) is not int:
        raise _Mismatch(path, "an integer", value)
    return value


def _float(value: Any, path: str) -> float:
    kind = type(value)
    if kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return float(value)
    raise _Mismatch(path, "a number", value)


def _union(options: tuple[Any, ...]) -> _Convert:
    nullable = type(None) in options
    rest = [_converter(o) for o in options if o is not type(None)]
    names = " or ".join(getattr(o, "__name__", repr(o)) for o in options)

    def convert(value: Any, path: str) -> Any:
        if value is None and nullable:
            return None
        for option in rest:
            try:
                return option(value, path)
            except _Mismatch:
                continue
        raise _Mismatch(path, names, value)

    return convert


def _literal(choices: tuple[Any, ...]) -> _Convert:
    def convert(value: Any, path: str) -> Any:
        for choice in choices:
            if value == choice and type(value) is type(choice):
                return value
        raise _Mismatch(path, f"one of {list(choices)!r}", value)

    return convert


def _list(item: _Convert) -> _Convert:
    def convert(value: Any, path: str) -> Any:
        if type(value) is not list:
            raise _Mismatch(path, "an array", value)
        if item is _passthrough:
            return value
        return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

    return convert


def _tuple(args: tuple[Any, ...]) -> _Convert:
    if len(args) == 2 and args[1] is Ellipsis:
        each = _list(_converter(args[0]))
        return lambda value, path: tuple(each(value, path))
    items = [_converter(a) for a in args]

    def convert(value: Any, path: str) -> Any:
        if type(value) is not list or (args and len(value) != len(items)):
            raise _Mismatch(path, f"an array of {len(items)}", value)
        if not args:
            return tuple(value)
        return tuple(
            c(v, f"{path}[{i}]") for i, (c, v) in enumerate(zip(items, value, strict=True))
        )

    return convert


def _set(kind: type, item: _Convert) -> _Convert:
    each = _list(item)
    return lambda value, path: kind(each(value, path))


def _dict(item: _Convert, args: tuple[Any, ...]) -> _Convert:
    if args and args[0] is not str:
        raise TypeError(f"JSON objects have string keys; cannot decode into dict[{args[0]!r}, ...]")

    def convert(value: Any, path: str) -> Any:
        if type(value) is not dict:
            raise _Mismatch(path, "an object", value)
        if item is _passthrough:
            return value
        return {k: item(v, f"{path}.{k}") for k, v in value.items()}

    return convert


def _enum(kind: type[enum.Enum]) -> _Convert:
    def convert(value: Any, path: str) -> Any:
        try:
            return kind(value)
        except ValueError:
            raise _Mismatch(path, f"a {kind.__name__} value", value) from None

    return convert


def _datetime(value: Any, path: str) -> _dt.datetime:
    if type(value) is not str:
        raise _Mismatch(path, "an ISO 8601 datetime string", value)
    try:
        return _dt.datetime.fromisoformat(value)
    except ValueError:
        raise _Mismatch(path, "an ISO 8601 datetime string", value) from None


#: Types a JSON document holds as strings, converted (and checked) by msgspec as it encodes them.
_MSGSPEC_LEAVES: dict[type, str] = {
    uuid.UUID: "a UUID string",
    decimal.Decimal: "a decimal number or string",
    _dt.date: "an ISO 8601 date string",
    _dt.time: "an ISO 8601 time string",
    _dt.timedelta: "an ISO 8601 duration or a number of seconds",
    bytes: "a base64 string",
    bytearray: "a base64 string",
}


def _msgspec_leaf(kind: type) -> _Convert:
    expected = _MSGSPEC_LEAVES[kind]
    convert = msgspec.convert

    def leaf(value: Any, path: str) -> Any:
        try:
            return convert(value, kind)
        except msgspec.ValidationError:
            raise _Mismatch(path, expected, value) from None

    return leaf


def _model_from_value(model: Any) -> _Convert:
    """A pydantic model or msgspec Struct nested inside a dataclass or container."""
    if hasattr(model, "model_validate"):
        with importing("pydantic", "a pydantic model payload"):
            import pydantic

        def convert_pydantic(value: Any, path: str) -> Any:
            try:
                return model.model_validate(value)
            except pydantic.ValidationError as exc:
                raise _Refused(path, f"{model.__name__}: {_pydantic_reason(exc)}") from exc

        return convert_pydantic
    import msgspec

    def convert_struct(value: Any, path: str) -> Any:
        try:
            return msgspec.convert(value, model)
        except msgspec.ValidationError as exc:
            raise _Refused(path, f"{model.__name__}: {exc}") from None

    return convert_struct


#: Dataclasses whose converter is being built: a field that refers back to one (a tree of
#: nodes) gets a forwarder that looks the finished converter up when it is first used.
_building: set[type] = set()


def _dataclass(cls: type) -> _Convert:
    if cls in _building:
        return lambda value, path: _converter(cls)(value, path)
    _building.add(cls)
    try:
        return _build_dataclass(cls)
    finally:
        _building.discard(cls)


def _build_dataclass(cls: type) -> _Convert:
    hints = typing.get_type_hints(cls)
    fields = [
        (
            f.name,
            _converter(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
        if f.init
    ]
    name = cls.__name__

    def convert(value: Any, path: str) -> Any:
        if type(value) is not dict:
            raise _Mismatch(path, f"an object for {name}", value)
        kwargs = {}
        for field, conv, required in fields:
            if field in value:
                kwargs[field] = conv(value[field], f"{path}.{field}")
            elif required:
                raise _Refused(path, f"Object missing required field `{field}` of {name}")
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:  # __post_init__ validation
            raise _Mismatch(path, f"a valid {name} ({exc})", value) from None

    return convert


# ---- encoding ----------------------------------------------------------------------------------


class EncodeError(TrioStreamsError, TypeError):
    """A value cannot be turned into a payload; ``path`` says which part (``$.items[0].due``)."""

    def __init__(self, kind: str, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        where = "" if path == "$" else f"{path}: "
        super().__init__(f"cannot encode {kind} as a payload: {where}{reason}")


def _enc_hook(value: Any) -> Any:
    """What msgspec does not know natively: pydantic models (nested in other values)."""
    dump = getattr(value, "model_dump", None)
    if dump is not None and hasattr(value, "model_dump_json"):
        return dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not encodable")


_json_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_json_encode = _json_encoder.encode


def encode(value: Any) -> bytes:
    """Payload bytes for ``value``: bytes as-is, str as UTF-8, everything else as JSON.

    JSON is msgspec's: dataclasses, msgspec Structs, pydantic models (``model_dump_json``),
    enums by value, ``UUID``/``Decimal`` as strings, dates and times in ISO 8601, sets and tuples
    as arrays, ``bytes`` inside a structure as base64. NaN and infinities become ``null``, as
    JavaScript does. Raises ``EncodeError`` (a ``TypeError``) naming the part that cannot be.
    """
    kind = type(value)
    if kind is bytes:
        return value  # type: ignore[no-any-return]
    if kind is str:
        return value.encode("utf-8")  # type: ignore[no-any-return]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    dump = getattr(value, "model_dump_json", None)
    try:
        if dump is not None:
            return dump().encode("utf-8")  # type: ignore[no-any-return]
        return _json_encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        path, reason = _unencodable_part(value, "$", exc)
        raise EncodeError(kind.__name__, path, reason) from None


def _unencodable_part(value: Any, path: str, error: BaseException) -> tuple[str, str]:
    """The path of the first part of ``value`` that cannot be encoded, and why (slow: for the
    error message only)."""
    for child_path, child in _children(value, path):
        try:
            _json_encode(child)
        except (TypeError, ValueError, OverflowError) as exc:
            return _unencodable_part(child, child_path, exc)
    return path, str(error)


def _children(value: Any, path: str) -> list[tuple[str, Any]]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f"{path}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, msgspec.Struct):
        return [(f"{path}.{name}", getattr(value, name)) for name in value.__struct_fields__]
    fields = getattr(type(value), "model_fields", None)
    if isinstance(fields, dict) and hasattr(value, "model_dump_json"):
        return [(f"{path}.{name}", getattr(value, name, None)) for name in fields]
    if isinstance(value, dict):
        return [(f"{path}.{key}", item) for key, item in value.items()]
    if isinstance(value, list | tuple | set | frozenset):
        return [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    return []
