"""Amortised schedule points for the hot path.

Trio's convention is that every async call is a checkpoint: a cancel point and a schedule point.
On the delivery hot path a schedule point per message is most of the cost of a no-op handler
(a full trip through the scheduler for each publish, send and receive). ``FairShare`` keeps every
call a cancel point and makes every ``every``-th one a schedule point as well, so a task that
never has to wait still yields regularly, and one that has to wait yields as usual.
"""

from __future__ import annotations

from trio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

__all__ = ["DEFAULT_SHARE", "FairShare"]

DEFAULT_SHARE = 32


class FairShare:
    __slots__ = ("_count", "_every")

    def __init__(self, every: int = DEFAULT_SHARE) -> None:
        self._every = every
        self._count = 0

    async def checkpoint(self) -> None:
        """A cancel point always; a schedule point every ``every`` calls."""
        await checkpoint_if_cancelled()
        self._count += 1
        if self._count >= self._every:
            self._count = 0
            await cancel_shielded_checkpoint()

    async def after_progress(self) -> None:
        """For a caller that already passed a cancel point: a schedule point now and then."""
        self._count += 1
        if self._count >= self._every:
            self._count = 0
            await cancel_shielded_checkpoint()

    def reset(self) -> None:
        """The caller just yielded anyway (it waited); start counting again."""
        self._count = 0
