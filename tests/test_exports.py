"""The public face: what each public module exports, and the records it exports.

Every public module declares ``__all__``; each name in it imports; every public name the module
defines (or, for a package, re-exports from its modules) is in it unless it is listed below as
deliberately left out. A record (a dataclass or a msgspec struct) a public module exports is
``@typing.final``, and frozen unless it is listed below with the reason it is not: a value
cannot change under the code that holds it.

The core's kit is every core module that is neither private (``_name``) nor part of the runtime
the import contracts keep transports and tools away from (pyproject.toml, the contract
"Transports and tools build on the core's kit"): a new module of the core is kit, and checked
here, unless the contract says otherwise.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import tomllib
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

import trio_streams.core

ROOT = Path(__file__).resolve().parent.parent

#: The modules users and transports import by name.
FACES = (
    "trio_streams",
    "trio_streams.file",
    "trio_streams.memory",
    "trio_streams.otel",
    "trio_streams.prometheus",
    "trio_streams.redis",
    "trio_streams.redis.client",
    "trio_streams.testing",
    "trio_streams.testing.faults",
    "trio_streams.testing.servers",
)

#: Public names a module defines and deliberately does not export, with why.
NOT_EXPORTED: dict[str, dict[str, str]] = {
    "trio_streams.core.delivery": {
        "TRANSPORT_HEADERS": "the headers a handler's context hides: the runtime's alone",
        "producer_headers": "the runtime's view of a delivery's headers for a handler",
        "retry_target_of": "the dispatcher's reading of a retry copy's header",
    },
    "trio_streams.redis.client": {
        "REDIS_CLIENT": "the feature a missing hiredis names in MissingExtra, for the client's "
        "own modules",
    },
}

#: Records a public module exports that are not frozen, with why: the code that holds one
#: changes it in place.
NOT_FROZEN: dict[str, str] = {
    "trio_streams.core.middleware.HandlerCall": (
        "a middleware's view of one handler run: the dispatcher fills in the message, the "
        "outcome, the verdict and the error as the run goes"
    ),
    "trio_streams.core.middleware.PublishCall": (
        "a middleware's view of one publish: a middleware may change its headers, the broker "
        "sets the receipt or the error once it sent"
    ),
    "trio_streams.core.middleware.RequestCall": (
        "a middleware's view of one request: a middleware may change its headers, the broker "
        "sets its outcome, its reply or its error once it is over"
    ),
    "trio_streams.core.routing.Declared": (
        "a subscriber on its way to its broker: the broker prepares it in place (a Redis broker "
        "fills in its group and consumer defaults)"
    ),
    "trio_streams.core.routing.Subscription": (
        "a mounted subscription: the fault kit's child process arms its handler in place"
    ),
    "trio_streams.testing.faults.plan.Fault": (
        "a standing fault: the proxy records the connections it hit and whether it healed"
    ),
    "trio_streams.testing.faults.plan.ProxyConnection": (
        "one live connection: the proxy counts its bytes and commands as they pass"
    ),
}

#: Records a public module exports that are not @final, with why: they are subclassed.
NOT_FINAL: dict[str, str] = {
    "trio_streams.memory.sources.MemoryStream": (
        "the memory broker serves subclasses of its sources (tests/memory checks it does)"
    ),
}


def _runtime_modules() -> set[str]:
    """The core modules the kit contract forbids transports and tools to import."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        contracts = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    (kit,) = [c for c in contracts if c["name"].startswith("Transports and tools build on")]
    return set(kit["forbidden_modules"])


def _kit() -> list[str]:
    runtime = _runtime_modules()
    names = (
        f"trio_streams.core.{info.name}"
        for info in pkgutil.iter_modules(trio_streams.core.__path__)
        if not info.name.startswith("_")
    )
    return sorted(name for name in names if name not in runtime)


PUBLIC = (*FACES, *_kit())


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def _top_level(body: list[ast.stmt]) -> typing.Iterator[tuple[ast.stmt, bool]]:
    """Each statement at module level (inside a top-level ``if``/``try`` too), and whether it
    is under ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.If):
            checking = isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for inner, _ in _top_level(node.body):
                yield inner, checking
            for inner, under in _top_level(node.orelse):
                yield inner, under
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        else:
            yield node, False


def _defined(module: ModuleType) -> set[str]:
    """The public names ``module`` defines: its functions, classes and assignments, and for a
    package the names it imports from its own modules (at once or lazily), not from elsewhere."""
    source = inspect.getsource(module)
    is_package = hasattr(module, "__path__")
    names: set[str] = set()
    for node, checking in _top_level(ast.parse(source).body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if not checking:
                names.add(node.name)
        elif isinstance(node, ast.Assign) and not checking:
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if not checking and node.value is not None:
                names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and is_package and node.level == 1:
            names.update(alias.asname or alias.name for alias in node.names)
    return {
        name
        for name in names
        if not name.startswith("_")
        and name != "TYPE_CHECKING"
        and not isinstance(getattr(module, name, None), ModuleType | typing.TypeVar)
    }


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_declared_and_imports(name: str) -> None:
    module = _module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ names something twice"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
    star: dict[str, Any] = {}
    exec(f"from {name} import *", star)
    assert set(exported) <= set(star)


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_complete(name: str) -> None:
    module = _module(name)
    left_out = NOT_EXPORTED.get(name, {})
    undeclared = _defined(module) - set(module.__all__) - set(left_out)
    assert not undeclared, f"{name} defines public names its __all__ leaves out: {undeclared}"
    stale = set(left_out) - _defined(module)
    assert not stale, f"NOT_EXPORTED lists names {name} no longer defines: {stale}"


def _records() -> dict[str, type]:
    """Every record a public module exports, by the name of the module that defines it."""
    found: dict[str, type] = {}
    for name in PUBLIC:
        module = _module(name)
        for exported in getattr(module, "__all__", ()):
            value = getattr(module, exported)
            if not inspect.isclass(value) or issubclass(value, BaseException):
                continue
            if dataclasses.is_dataclass(value) or issubclass(value, msgspec.Struct):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


RECORDS = _records()


def _frozen(record: type) -> bool:
    if dataclasses.is_dataclass(record):
        params: Any = getattr(record, "__dataclass_params__")  # noqa: B009
        return bool(params.frozen)
    return bool(getattr(record, "__struct_config__").frozen)  # noqa: B009


@pytest.mark.parametrize("qualname", sorted(RECORDS))
def test_records_are_final(qualname: str) -> None:
    if qualname in NOT_FINAL:
        assert not getattr(RECORDS[qualname], "__final__", False), "listed in NOT_FINAL"
        return
    assert getattr(RECORDS[qualname], "__final__", False), f"{qualname} is not @final"


@pytest.mark.parametrize("qualname", sorted(RECORDS))
def test_records_are_frozen(qualname: str) -> None:
    if qualname in NOT_FROZEN:
        assert not _frozen(RECORDS[qualname]), "listed in NOT_FROZEN, but frozen"
        return
    assert _frozen(RECORDS[qualname]), f"{qualname} is not frozen"


def test_the_exception_lists_name_exported_records() -> None:
    stale = (set(NOT_FROZEN) | set(NOT_FINAL)) - set(RECORDS)
    assert not stale, f"listed, but no public module exports them: {stale}"


#: Imports of another module's private name, each until the name gets a public home (then
#: the test below asks for the entry's removal).
PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def _private_imports() -> set[tuple[str, str]]:
    """(importer, module.name) for every ``from module import _name`` inside the package."""
    found = set()
    for path in sorted((ROOT / "trio_streams").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        package = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and source.startswith("trio_streams"):
                    found.add((module, f"{source}.{alias.name}"))
    return found


@pytest.mark.slow
def test_no_module_imports_another_modules_private_name() -> None:
    """A ``_name`` is its module's own: what another module needs has a public name (private
    modules are the import contracts' business: pyproject.toml)."""
    found = _private_imports()
    assert not found - PRIVATE_IMPORTS, f"private names imported: {found - PRIVATE_IMPORTS}"
    stale = PRIVATE_IMPORTS - found
    assert not stale, f"gone, remove them from PRIVATE_IMPORTS: {stale}"
