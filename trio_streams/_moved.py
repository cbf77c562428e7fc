"""Where the modules of the flat layout went: their old names still import, with a warning.

The package was a flat list of modules before it was built in layers (docs/architecture.md,
"Layout"). An import or a configuration that names a module by its old path (a logging config's
``"()": "trio_streams.logs.JsonFormatter"``, ``from trio_streams.errors import
ConfigurationError``) keeps working: the old name is an alias of the module's new home, the very
same module object, and importing it warns with a ``DeprecationWarning`` naming the new path.

The finder sits at the end of ``sys.meta_path``, so Python's own finders answer first: it is asked
only about a name they did not find, and imports nothing until that name is an old one.
"""

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing

if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
else:
    Loader = object  # importlib.abc costs an import; the loader protocol needs no base

__all__ = ["MOVED"]

#: Old module paths and their new homes.
MOVED: dict[str, str] = {
    "trio_streams.app": "trio_streams.core.app",
    "trio_streams.asyncapi": "trio_streams.integrations.asyncapi",
    "trio_streams.banner": "trio_streams.core.banner",
    "trio_streams.broker": "trio_streams.core.broker",
    "trio_streams.channel": "trio_streams.core._channel",
    "trio_streams.cli_args": "trio_streams.cli.args",
    "trio_streams.cli_asyncapi": "trio_streams.cli.asyncapi",
    "trio_streams.cli_publish": "trio_streams.cli.publish",
    "trio_streams.cli_run": "trio_streams.cli.run",
    "trio_streams.codec": "trio_streams.core.codec",
    "trio_streams.context": "trio_streams.core.context",
    "trio_streams.delayed": "trio_streams.core._delayed",
    "trio_streams.delivery": "trio_streams.core.delivery",
    "trio_streams.depends": "trio_streams.core.depends",
    "trio_streams.destinations": "trio_streams.core.destinations",
    "trio_streams.dispatch": "trio_streams.core.dispatch",
    "trio_streams.driver": "trio_streams.core.driver",
    "trio_streams.errors": "trio_streams.core.errors",
    "trio_streams.escapes": "trio_streams.core._escapes",
    "trio_streams.failure": "trio_streams.core._failure",
    "trio_streams.file.cli": "trio_streams.cli.file",
    "trio_streams.groups": "trio_streams.core.groups",
    "trio_streams.handler": "trio_streams.core.handler",
    "trio_streams.host": "trio_streams.core.host",
    "trio_streams.http_endpoints": "trio_streams.running.http_endpoints",
    "trio_streams.http_get": "trio_streams.running.http_get",
    "trio_streams.logs": "trio_streams.core.logs",
    "trio_streams.middleware": "trio_streams.core.middleware",
    "trio_streams.outcome": "trio_streams.core.outcome",
    "trio_streams.pipeline": "trio_streams.core.pipeline",
    "trio_streams.positions": "trio_streams.core.positions",
    "trio_streams.record.cli": "trio_streams.cli.record",
    "trio_streams.reporting": "trio_streams.core.reporting",
    "trio_streams.routing": "trio_streams.core.routing",
    "trio_streams.subscription": "trio_streams.core.subscription",
    "trio_streams.supervisor": "trio_streams.running.supervisor",
    "trio_streams.supervisor_http": "trio_streams.running.supervisor_http",
    "trio_streams.top.cli": "trio_streams.cli.top",
    "trio_streams.transport": "trio_streams.core.transport",
    "trio_streams.worker_metrics": "trio_streams.running.worker_metrics",
}


class _Alias(Loader):
    """Loads an old name as the module at its new home (the same object, not a copy)."""

    def __init__(self, new: str) -> None:
        self._new = new
        self._spec: ModuleSpec | None = None

    def create_module(self, spec: "ModuleSpec") -> "ModuleType":
        import importlib
        import warnings

        warnings.warn(
            f"{spec.name} moved to {self._new}; import it from there (or its public names "
            "from trio_streams)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self._new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: "ModuleType") -> None:
        # The import system stamped the alias's spec on the module: give it back its own.
        module.__spec__ = self._spec


class _MovedFinder:
    """A meta path finder for the old names in :data:`MOVED`."""

    @staticmethod
    def find_spec(fullname: str, path: object = None, target: object = None) -> "ModuleSpec | None":
        new = MOVED.get(fullname)
        if new is None:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if _MovedFinder not in sys.meta_path:
        sys.meta_path.append(_MovedFinder)
