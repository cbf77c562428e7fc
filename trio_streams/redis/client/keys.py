"""Which arguments of a command are keys, and which cluster slot a key hashes to.

The key positions come from the server's own ``COMMAND`` table (first key, last key, step),
loaded once per client, so new commands need no code here. Commands whose keys move with their
arguments (EVAL's numkeys, XREADGROUP's STREAMS...) are handled by rule, else by the server's
full key specifications (``COMMAND``'s key specs: where the search begins, an index or a
keyword, and how keys are found from there, a range or a key count), as the server itself
reads them; a command whose specs cannot say (a spec marked ``incomplete``, or of type
``unknown``: ``SORT ... STORE``, ``MIGRATE``) is asked of the server with ``COMMAND GETKEYS``
where a round trip is possible.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import CommandEncodingError
from .protocol import Arg, Command

SLOTS = 16384


def _key_bytes(key: Arg) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        try:
            return key.encode()
        except UnicodeEncodeError:
            raise CommandEncodingError(
                f"a key is not valid Unicode (a lone surrogate?): {key!r}"
            ) from None
    if isinstance(key, memoryview):
        return key.tobytes()
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return str(key).encode()
    raise CommandEncodingError(f"a key must be bytes, str, int or float, not {type(key).__name__}")


def key_slot(key: Arg) -> int:
    """The cluster slot of ``key``: CRC16 of its hash tag (``{...}``) or of the whole key."""
    data = _key_bytes(key)
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


@dataclass(frozen=True, slots=True)
class KeySearch:
    """One key specification of a command (an entry of ``COMMAND``'s key specs): where the
    search begins and how keys are found from there.

    ``begin`` is ``"index"`` (at argument ``index``), ``"keyword"`` (after ``keyword``,
    searched from argument ``startfrom``, backwards from the end when negative) or
    ``"unknown"``. ``find`` is ``"range"`` (``lastkey``, ``keystep``, ``limit``), ``"keynum"``
    (the count at ``keynumidx``, the first key at ``firstkey``, ``keystep``) or
    ``"unknown"``. ``incomplete``: the spec may miss keys.
    """

    begin: str
    find: str
    index: int = 0
    keyword: bytes = b""
    startfrom: int = 0
    lastkey: int = 0
    keystep: int = 1
    limit: int = 0
    keynumidx: int = 0
    firstkey: int = 0
    incomplete: bool = False


@dataclass(frozen=True, slots=True)
class KeySpec:
    """Key positions of one command, as the server's COMMAND table gives them: the legacy
    first/last/step (all the keys unless ``movable``) and, from a server that has them, the
    full key specifications."""

    first: int
    last: int
    step: int
    movable: bool
    searches: tuple[KeySearch, ...] = ()


def text(value: Any) -> str:
    """A reply value (bytes or other) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _flags(value: Any) -> set[str]:
    return {text(v) for v in value} if isinstance(value, (list, set, tuple)) else set()


def _fields(value: Any) -> dict[str, Any]:
    """A RESP3 map or a RESP2 flat ``[key, value, ...]`` list as a dict (empty otherwise)."""
    if isinstance(value, dict):
        return {text(k): v for k, v in value.items()}
    if isinstance(value, list) and len(value) % 2 == 0:
        return {text(k): v for k, v in zip(value[::2], value[1::2], strict=True)}
    return {}


def _search(spec: Any) -> KeySearch:
    """One key spec of a ``COMMAND`` entry; a shape this module does not know is ``unknown``
    (its keys cannot be told from it)."""
    fields = _fields(spec)
    begin, find = _fields(fields.get("begin_search")), _fields(fields.get("find_keys"))
    begin_type, find_type = text(begin.get("type", "unknown")), text(find.get("type", "unknown"))
    at, how = _fields(begin.get("spec")), _fields(find.get("spec"))
    incomplete = "incomplete" in {f.lower() for f in _flags(fields.get("flags"))}
    try:
        values: dict[str, Any] = {
            "index": int(at.get("index", 0)),
            "keyword": _key_bytes(at.get("keyword", b"")).upper(),
            "startfrom": int(at.get("startfrom", 0)),
            "lastkey": int(how.get("lastkey", 0)),
            "keystep": int(how.get("keystep", 1)),
            "limit": int(how.get("limit", 0)),
            "keynumidx": int(how.get("keynumidx", 0)),
            "firstkey": int(how.get("firstkey", 0)),
        }
    except (TypeError, ValueError, CommandEncodingError):
        return KeySearch("unknown", "unknown")
    if begin_type not in ("index", "keyword"):
        begin_type = "unknown"
    if find_type not in ("range", "keynum"):
        find_type = "unknown"
    return KeySearch(begin_type, find_type, incomplete=incomplete, **values)


def parse_command_table(reply: Sequence[Any]) -> dict[str, KeySpec]:
    """``name -> KeySpec`` from a ``COMMAND`` reply; subcommands as ``container|sub``."""
    table: dict[str, KeySpec] = {}

    def add(entry: Sequence[Any]) -> None:
        name = text(entry[0]).lower()
        flags = _flags(entry[2])
        specs = entry[8] if len(entry) > 8 and isinstance(entry[8], list) else []
        table[name] = KeySpec(
            int(entry[3]),
            int(entry[4]),
            int(entry[5]),
            "movablekeys" in flags,
            tuple(_search(spec) for spec in specs),
        )
        if len(entry) > 9 and entry[9]:
            for sub in entry[9]:
                add(sub)

    for entry in reply:
        add(entry)
    return table


def _numkeys(args: Command, at: int) -> list[Arg] | None:
    """The ``numkeys`` keys that follow ``args[at]``; None when that is not a count (the
    server then says what is wrong)."""
    try:
        count = int(_key_bytes(args[at]))
    except (IndexError, ValueError):
        return None
    if count < 0 or at + 1 + count > len(args):
        return None
    return list(args[at + 1 : at + 1 + count])


#: XREAD/XREADGROUP options before ``STREAMS``, and how many arguments each takes.
_STREAM_READ_OPTIONS = {b"COUNT": 1, b"BLOCK": 1, b"NOACK": 0}


def _stream_read_keys(args: Command, first_option: int) -> list[Arg] | None:
    """The stream keys of XREAD / XREADGROUP: half of what follows the ``STREAMS`` keyword.

    The options before it are walked by their arity, so a group, consumer or count that
    happens to be spelt ``streams`` is never taken for the keyword.
    """
    index = first_option
    while index < len(args):
        word = _key_bytes(args[index]).upper()
        if word == b"STREAMS":
            rest = args[index + 1 :]
            if not rest or len(rest) % 2:
                return None  # malformed: let the server refuse it
            return list(rest[: len(rest) // 2])
        arity = _STREAM_READ_OPTIONS.get(word)
        if arity is None:
            return None  # an option this module does not know: ask the server
        index += 1 + arity
    return None


def _movable_keys(name: str, args: Command) -> list[Arg] | None:
    """Keys of the common movable-key commands, or None if this module has no rule."""
    if name in {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}:
        return _numkeys(args, 2)
    if name == "xread":
        return _stream_read_keys(args, 1)
    if name == "xreadgroup":
        # XREADGROUP GROUP group consumer [options] STREAMS key... id...
        if len(args) < 4 or _key_bytes(args[1]).upper() != b"GROUP":
            return None
        return _stream_read_keys(args, 4)
    if name in {"zunionstore", "zinterstore", "zdiffstore"}:
        keys = _numkeys(args, 2)
        return None if keys is None else [args[1], *keys]
    if name in {"zunion", "zinter", "zdiff", "sintercard", "zintercard", "lmpop", "zmpop"}:
        return _numkeys(args, 1)
    if name in {"blmpop", "bzmpop"}:
        return _numkeys(args, 2)
    return None


def search_keys(searches: Sequence[KeySearch], args: Command) -> list[Arg] | None:
    """The keys of ``args`` as the server finds them from its key specs (Redis's
    ``getKeysUsingKeySpecs``), or None when they cannot say: a spec ``incomplete`` or
    ``unknown``, or arguments the specs do not fit (the server refuses those anyway). A
    keyword that is absent contributes no key (``GEORADIUS`` without ``STORE``)."""
    if not searches:
        return None
    argc = len(args)
    keys: list[Arg] = []
    for search in searches:
        if search.incomplete or search.begin == "unknown" or search.find == "unknown":
            return None
        found = search.index if search.begin == "index" else _after_keyword(search, args)
        if found is None:
            continue  # the keyword is absent: this spec names no key
        first = found
        if search.find == "range":
            step = search.keystep
            if search.lastkey >= 0:
                last = first + search.lastkey
            elif not search.limit:
                last = argc + search.lastkey
            else:
                last = first + ((argc - first) // search.limit + search.lastkey)
        else:
            step = search.keystep
            at = first + search.keynumidx
            if at >= argc:
                return None
            try:
                count = int(_key_bytes(args[at]))
            except (ValueError, CommandEncodingError):
                return None
            if count < 0:
                return None
            first += search.firstkey
            last = first + count - 1
        if step <= 0 or first >= argc or last >= argc or last < first:
            return None
        keys.extend(args[first : last + 1 : step])
    return keys


def _after_keyword(search: KeySearch, args: Command) -> int | None:
    """The argument after ``search.keyword``, searched as the server does (from
    ``startfrom`` forwards, or backwards from the end when negative); None if absent."""
    argc = len(args)
    if search.startfrom > 0:
        positions: range = range(search.startfrom, argc - 1)
    else:
        positions = range(argc + search.startfrom, 0, -1)
    for i in positions:
        try:
            if 0 <= i < argc and _key_bytes(args[i]).upper() == search.keyword:
                return i + 1
        except CommandEncodingError:
            continue  # not a word: not the keyword
    return None


class KeyFinder:
    """Finds the keys of a command from the server's command table."""

    def __init__(self, table: dict[str, KeySpec]) -> None:
        self._table = table

    def keys(self, args: Command) -> list[Arg] | None:
        """The key arguments, or None when only the server can tell (``COMMAND GETKEYS``)."""
        name = text(args[0]).lower()
        spec = self._table.get(name)
        if spec is None:
            return []  # unknown here: treated as keyless; the server answers with an error
        if spec.first == 0 and len(args) > 1:
            sub = self._table.get(f"{name}|{text(args[1]).lower()}")
            if sub is not None:
                spec = sub
        if spec.movable:
            keys = _movable_keys(name, args)
            return keys if keys is not None else search_keys(spec.searches, args)
        if spec.first <= 0:
            return []
        last = spec.last if spec.last >= 0 else len(args) + spec.last
        return list(args[spec.first : last + 1 : spec.step or 1])
