"""``NamedSource``: the base of the sources that read named streams, lists or channels.

Every source a subscription reads (``FileStream``, ``MemoryStream``, ``RedisStream``,
``RedisList``, ``RedisChannel``, and the in-process forms ``MemoryList`` and ``MemoryChannel``)
is an immutable value: the names it reads and a few keyword arguments. What follows from that
alone is here, once: its ``name``, its copy under a router's prefix, a copy with some arguments
changed (:meth:`NamedSource.evolve`), and a repr that reads as the call that makes it. A
subclass says what its arguments are (:meth:`~NamedSource.arguments`), which of them its repr
shows (:attr:`~NamedSource.shown`) and what call derived it (:meth:`~NamedSource.derived_by`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Self

from .transport import Source

__all__ = ["NamedSource"]


class NamedSource(Source):
    """A source made of the names it reads and keyword arguments (see the module)."""

    __slots__ = ()

    #: The name its repr gives its class (a user's subclass of a source keeps its repr).
    label: ClassVar[str]
    #: The keyword arguments its repr shows, in order, each with the value it is not shown
    #: at (its default).
    shown: ClassVar[tuple[tuple[str, object], ...]] = ()

    @property
    def name(self) -> str:
        return ",".join(self.streams)

    @abstractmethod
    def arguments(self) -> dict[str, Any]:
        """The keyword arguments that, with its names, make this source again."""

    def remake(self, names: tuple[str, ...], arguments: Mapping[str, Any]) -> Self:
        """A source of this class from ``names`` and keyword ``arguments`` (its constructor
        takes the names as positional arguments, unless it says otherwise)."""
        make: Callable[..., Self] = type(self)
        return make(*names, **arguments)

    def evolve(self, *, names: Iterable[str] | None = None, **changes: Any) -> Self:
        """This source with other ``names``, or some keyword arguments changed; checked as a
        new one is."""
        given = self.streams if names is None else tuple(names)
        return self.remake(given, {**self.arguments(), **changes})

    def with_prefix(self, prefix: str) -> Self:
        if not prefix:
            return self
        return self.evolve(names=[prefix + name for name in self.streams])

    def derived_by(self) -> str | None:
        """The method that derived it from its plain form (``replay``, ``tail``), which its
        repr ends with; None (the default): none."""
        return None

    def __repr__(self) -> str:
        arguments = self.arguments()
        parts = [repr(name) for name in self.streams]
        parts += [
            f"{key}={arguments[key]!r}" for key, default in self.shown if arguments[key] != default
        ]
        text = f"{self.label}({', '.join(parts)})"
        derived = self.derived_by()
        return text if derived is None else f"{text}.{derived}()"
