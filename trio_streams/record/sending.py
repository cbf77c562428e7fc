"""Sending a replay's commands so that nothing after a refused one takes effect.

A pipeline runs every command it carries: when the server refuses one (``WRONGTYPE``: the key
is not a stream; ``OOM``...), the ones after it in the same pipeline are applied anyway. A
replay must stop at the first refused command, so a batch goes out as one script that runs its
commands in order and returns at the first error reply, saying how many went through: one round
trip per batch, and nothing after a refusal is published.

A script's keys must share a slot in a cluster, so there a batch is split into runs of one slot,
each sent when the one before it went through. A command with too many arguments for one
script call goes alone.

Cancellation: cancelled while a script is on its way, it may or may not have run (the count is
lost); the commands of a batch not yet sent are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

from ..redis.client import RedisClient, RedisCluster, ReplyError
from ..redis.client.keys import key_slot
from ..redis.client.scripts import Script

__all__ = ["Refusal", "send_in_order"]

#: Runs ``ARGV`` as commands (each its argument count, then its arguments) until one is refused.
SCRIPT = Script(
    """
local i, done = 1, 0
while i <= #ARGV do
  local argc = tonumber(ARGV[i])
  local reply = redis.pcall(unpack(ARGV, i + 1, i + argc))
  if type(reply) == 'table' and reply.err then return {done, reply.err} end
  done = done + 1
  i = i + argc + 1
end
return {done}
""",
    purpose="replay commands in order",
)
#: More arguments than this and a command goes alone (Lua's ``unpack`` has a stack limit).
MAX_SCRIPT_ARGS = 1000

Command = tuple[object, ...]


@final
@dataclass(frozen=True)
class Refusal:
    """The server refused ``commands[index]``: what came before it was applied, nothing after."""

    index: int
    error: str


async def send_in_order(client: RedisClient, commands: Sequence[Command]) -> Refusal | None:
    """Run ``commands`` in order; None when all went through, else the first refusal."""
    done = 0
    for run in _runs(commands, cluster=isinstance(client, RedisCluster)):
        sent, error = await _send_run(client, run)
        if error is not None:
            return Refusal(done + sent, error)
        done += sent
    return None


def _runs(commands: Sequence[Command], *, cluster: bool) -> list[Sequence[Command]]:
    runs: list[Sequence[Command]] = []
    begin = 0
    slot: int | None = None
    for n, command in enumerate(commands):
        alone = len(command) > MAX_SCRIPT_ARGS
        this = key_slot(command[1]) if cluster else None  # type: ignore[arg-type]
        if n > begin and (alone or this != slot or len(commands[n - 1]) > MAX_SCRIPT_ARGS):
            runs.append(commands[begin:n])
            begin = n
        slot = this
    if begin < len(commands):
        runs.append(commands[begin:])
    return runs


async def _send_run(client: RedisClient, run: Sequence[Command]) -> tuple[int, str | None]:
    if len(run) == 1 and len(run[0]) > MAX_SCRIPT_ARGS:
        try:
            await client.execute(*run[0])
        except ReplyError as exc:
            return 0, str(exc)
        return 1, None
    keys = list(dict.fromkeys(command[1] for command in run))
    args: list[object] = []
    for command in run:
        args.append(len(command))
        args.extend(command)
    try:
        reply = await client.execute("EVAL", SCRIPT, len(keys), *keys, *args)
    except ReplyError as exc:  # the script as a whole was refused (OOM, NOPERM...): none ran
        return 0, str(exc)
    sent = int(reply[0])
    if len(reply) > 1:
        error = reply[1]
        return sent, error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    return sent, None
