"""``async with`` support for the file objects that close with ``aclose()``."""

from __future__ import annotations

from typing import Self


class AsyncClosing:
    """Adds ``async with`` to a class whose ``aclose()`` takes no required argument."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
