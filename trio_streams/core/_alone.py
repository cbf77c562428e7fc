"""Runs alone: a delivery whose last run died with its process runs while no other does.

When a process dies with several handlers under way (``workers=n``, ordered lanes), each of
those runs counts as an attempt of its message, though only one of them may have killed it (a
poison message that calls ``os._exit``, segfaults, runs out of memory). Running them all again
side by side would kill the innocent ones with it once more, and again, until ``max_attempts``
dead-letters them with the poison. So a delivery the source calls a *suspect*
(``SubscriptionSource.runs_alone``: its last run did not end) waits until no other handler of
the subscription runs, and holds others back while it runs: the poison then dies alone, and
every other suspect completes. Ordinary deliveries pay one counter each; only suspects wait.

Cancellation: a wait for the gate is a checkpoint and may be cancelled; the gate is left as it
was (a cancelled suspect never took it; a cancelled ordinary run never counted itself).
"""

from __future__ import annotations

from trio.lowlevel import ParkingLot, checkpoint

__all__ = ["RunGate"]


class RunGate:
    """One subscription's handler runs, and the suspect among them that runs alone."""

    __slots__ = ("_lot", "active", "alone")

    def __init__(self) -> None:
        #: Handler runs under way (a suspect's included).
        self.active = 0
        #: A suspect runs, or waits for the others to end: nothing else may start.
        self.alone = False
        self._lot = ParkingLot()

    async def enter(self) -> None:
        """An ordinary run begins (waiting while a suspect runs or waits for its turn)."""
        while self.alone:
            await self._lot.park()
        self.active += 1

    def enter_nowait(self) -> bool:
        """``enter`` without a wait: False (nothing counted) while a suspect holds the gate."""
        if self.alone:
            return False
        self.active += 1
        return True

    def leave(self) -> None:
        self.active -= 1
        if self.alone and self.active == 0:
            self._lot.unpark_all()

    async def enter_alone(self) -> None:
        """A suspect's run begins once it is the only one; one suspect at a time."""
        await checkpoint()
        while self.alone:
            await self._lot.park()
        self.alone = True
        try:
            while self.active:
                await self._lot.park()
        except BaseException:
            self.alone = False
            self._lot.unpark_all()
            raise
        self.active += 1

    def leave_alone(self) -> None:
        self.active -= 1
        self.alone = False
        self._lot.unpark_all()
