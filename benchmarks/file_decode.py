"""``trio-streams file decode --format ndjson`` on 200k messages of 100 bytes, to /dev/null.

The file is written with the library first. Timed in interleaved rounds, each a fresh process:

- the command, as a user runs it;
- the peer, the floor of what Python can do with this file: a minimal loop in one process that
  reads it with the library's reader (a batch at a time) and writes each batch as ndjson with
  ``msgspec.json.Encoder.encode_lines``, in one write. Its lines are compact JSON with UTF-8 text
  (msgspec has no ASCII escaping), so they are not the command's bytes: the command's output is
  ``json.dumps``' own, spaces and escapes included, which ``file write`` reads back byte for
  byte;
- with ``--before DIR`` (a source tree of an earlier trio-streams), the command from there, and
  a check that both print the same bytes;
- with ``--ss-decode 'COMMAND {file}'``, upstream's Rust ``ss-decode`` as a peer. It is not on
  this machine (its crate cannot be fetched: no crates registry is reachable), and
  ``benchmarks/_common.py`` records no figure of it: without the option, it is said to be not
  measured, and no figure is printed for it.

Printed: the median wall and CPU (user + system) seconds and messages a second of each, and the
ratios of the command to the peers.
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _processes import NEUTRAL, Timings, python_env, timed

#: The peer: the library's reader and msgspec's ndjson encoder, a batch at a time, one write each.
PEER = """
import sys
import msgspec
from trio_streams.file.reader import FileReader

encode_lines = msgspec.json.Encoder().encode_lines
out = sys.stdout.buffer
with FileReader(sys.argv[1], internal=True) as reader:
    while True:
        batch = reader.read_messages(4096)
        if not batch:
            if reader.eos is None and not reader.at_eof:
                continue
            break
        rows = []
        for m in batch:
            try:
                payload, encoding = m.payload.decode(), "utf8"
            except UnicodeDecodeError:
                payload, encoding = m.payload, "base64"  # msgspec writes bytes as base64
            rows.append({"stream_key": m.stream_key, "shard": m.shard, "seq": m.seq,
                         "timestamp_ms": m.timestamp_ms, "payload": payload,
                         "encoding": encoding})
        out.write(encode_lines(rows))
"""

#: Payload bytes: printable ASCII, as most ndjson payloads are.
ALPHABET = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;-_"


def write_file(python: str, path: Path, messages: int) -> None:
    """``messages`` messages of 100 bytes on two keys, written with the library."""
    code = (
        "import random, sys\nfrom trio_streams.file.writer import StreamWriter\n"
        "rnd = random.Random(7)\nalphabet = sys.argv[3].encode()\n"
        "with StreamWriter(sys.argv[1]) as writer:\n"
        "    for start in range(0, int(sys.argv[2]), 10_000):\n"
        "        writer.publish_many([(('orders', 'payments')[n % 2],"
        " bytes(rnd.choices(alphabet, k=100)), None)"
        " for n in range(start, min(start + 10_000, int(sys.argv[2])))])\n"
    )
    timed(
        [python, "-c", code, str(path), str(messages), ALPHABET.decode()], python_env(), Timings()
    )


def digest(argv: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(argv, cwd=NEUTRAL, env=env, capture_output=True, check=True)
    return hashlib.sha256(result.stdout).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None, metavar="DIR")
    parser.add_argument("--ss-decode", default=None, metavar="'COMMAND {file}'")
    args = parser.parse_args()
    python = sys.executable
    after = python_env()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "decode.ss"
        write_file(python, path, args.messages)
        command = [python, "-m", "trio_streams", "file", "decode", "--format", "ndjson", str(path)]
        runs: dict[str, tuple[list[str], dict[str, str]]] = {
            "file decode --format ndjson": (command, after),
            "peer: reader + msgspec (floor)": ([python, "-c", PEER, str(path)], after),
        }
        if args.before is not None:
            before = python_env(args.before)
            runs["file decode, before"] = (command, before)
            same = digest(command, before) == digest(command, after)
            print(f"before and after print the same bytes: {'yes' if same else 'NO'}")
        if args.ss_decode is not None:
            ss_decode = shlex.split(args.ss_decode.format(file=path))
            if shutil.which(ss_decode[0]) is None:
                raise SystemExit(f"{ss_decode[0]}: not found")
            runs["upstream ss-decode"] = (ss_decode, after)
        for argv, env in runs.values():  # warm-up: bytecode written, the file in the page cache
            timed(argv, env, Timings())
        timings = {name: Timings() for name in runs}
        names = list(runs)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                argv, env = runs[name]
                timed(argv, env, timings[name])

    print(f"{args.messages} messages of 100 B, {args.rounds} interleaved rounds, medians")
    for name, timing in timings.items():
        print(
            f"{name:34} {timing.wall_median:6.2f} s wall "
            f"({args.messages / timing.wall_median / 1000:6.1f}k msgs/s)  "
            f"{timing.cpu_median:6.2f} s CPU ({args.messages / timing.cpu_median / 1000:6.1f}k)"
        )
    ours = timings["file decode --format ndjson"]
    for name, timing in timings.items():
        if name == "file decode --format ndjson":
            continue
        print(
            f"command / {name}: x{timing.wall_median / ours.wall_median:.2f} speed (wall), "
            f"x{timing.cpu_median / ours.cpu_median:.2f} (CPU)"
        )
    if args.ss_decode is None:
        print(
            "upstream ss-decode: not measured (not on this machine: no crates registry to build "
            "it from; benchmarks/_common.py records no figure of it)"
        )


if __name__ == "__main__":
    main()
