"""What ``trio-streams run`` checks while it loads its target module: that the module does not
run the app itself, and that no broker with subscribers was left out of the app.

The CLI imports ``module:attribute`` inside :func:`importing`; ``App.run`` refuses to start
while that import is under way (:func:`refuse_run_while_importing`), since the CLI runs the app
itself once the import returns: a module-level ``app.run()`` would otherwise run it twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType

from .broker import Broker
from .errors import ConfigurationError

__all__ = ["importing", "refuse_run_while_importing", "unregistered_brokers"]

#: The module ``trio-streams run`` is importing now, if it is importing one.
_importing: ContextVar[str | None] = ContextVar("trio_streams_cli_importing", default=None)


@contextmanager
def importing(module_name: str) -> Iterator[None]:
    """Around the CLI's import of ``module_name``."""
    token = _importing.set(module_name)
    try:
        yield
    finally:
        _importing.reset(token)


def refuse_run_while_importing(app_name: str) -> None:
    """Raise ``ConfigurationError`` if ``trio-streams run`` is importing a module right now."""
    module_name = _importing.get()
    if module_name is not None:
        raise ConfigurationError(
            f"app {app_name!r}: app.run() was called while `trio-streams run` imports "
            f"{module_name!r}, which runs the app itself: put the call under "
            '`if __name__ == "__main__":`'
        )


def unregistered_brokers(module: ModuleType) -> str | None:
    """One line naming each broker among ``module``'s globals that has subscriptions but that
    no app has registered (its handlers would never run), or None if there is none. A broker
    another app of the module registers is that app's: a module may hold several."""
    problems = []
    for name, value in vars(module).items():
        if isinstance(value, Broker) and value.subscriptions and not value.registered:
            count = len(value.subscriptions)
            problems.append(
                f"{type(value).__name__} {name!r} ({value.name}) in module {module.__name__!r} "
                f"has {count} subscription(s) but no app registers it: add app.broker({name})"
            )
    return "; ".join(problems) or None
