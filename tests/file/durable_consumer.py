"""A durable consumer process, killed with SIGKILL by ``test_durable_kill``.

It replays ``orders`` of the file named on the command line as consumer ``billing``, with four
workers whose handlers take a random moment (so settles finish out of order), and writes each
payload (its sequence number) to stdout as it handles it, unbuffered.
"""

from __future__ import annotations

import os
import random
import sys

import trio

from trio_streams import App
from trio_streams.file import FileBroker, FileStream


def build(path: str) -> App:
    app = App("killable")
    broker = app.broker(FileBroker(path, existing_only=True, durable_interval=0.02))

    @broker.subscriber(
        FileStream("orders", durable="billing").replay(), workers=4, buffer=16, count=16
    )
    async def handle(n: int) -> None:
        await trio.sleep(random.random() * 0.002)
        os.write(1, b"%d\n" % n)  # one write per line: a pipe never splits it

    return app


if __name__ == "__main__":
    build(sys.argv[1]).run()
