"""An app run in a subprocess by the signal and CLI tests. HANDLER picks its handler's mood."""

import os

import trio

from trio_streams import App, MemoryBroker, MemoryStream

app = App("signals", shutdown_timeout=60)
broker = app.broker(MemoryBroker())
MOOD = os.environ.get("HANDLER", "finishes")


@app.on_startup
def setup() -> None:
    app.state.stopping = trio.Event()


@app.after_startup
async def kick_off() -> None:
    await broker.publish("work", 1)


@app.on_shutdown
def shutting_down() -> None:
    print("draining", flush=True)
    app.state.stopping.set()


@app.after_shutdown
def closed() -> None:
    print("closed", flush=True)


@broker.subscriber(MemoryStream("work"))
async def work(n: int) -> None:
    print("handling", flush=True)
    try:
        if MOOD == "finishes":
            # Still running when shutdown begins; finishes during the drain.
            await app.state.stopping.wait()
            await trio.sleep(0.1)
        else:
            await trio.sleep_forever()
    except trio.Cancelled:
        print("cancelled", flush=True)
        raise
    print("handled", flush=True)
