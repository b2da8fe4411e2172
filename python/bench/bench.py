"""Benchmarks of the Python package, measured side by side in one run.

    python bench/bench.py --agui PATH/TO/agui --gen PATH/TO/agui-gen [--events 1000000]

1. compact_events on an N-event NDJSON file, bytes path, against `agui
   compact` on the same file (best of 3 each, alternating).
2. compact_events and reduce on 100k events given as a list of dicts,
   against json.dumps + json.loads of the same list.
3. Store.append from Python, 1 writer, SQLite, batches of 100 events from
   runs of 1000, against the Rust store benchmark (`agui store bench`) on
   the same machine in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, List

import agui


def best(f: Callable[[], Any], tries: int = 3) -> float:
    times = []
    for _ in range(tries):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agui", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--dict-events", type=int, default=100_000)
    ap.add_argument("--append-events", type=int, default=200_000)
    ap.add_argument("--modes", default="deltas,snapshot,latest",
                    help="compaction modes to measure (snapshot restates the conversation at "
                         "every run: its output, and time, grow with runs x messages)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="agui-py-bench-"))

    big = tmp / "big.ndjson"
    with big.open("wb") as f:
        subprocess.run([args.gen, "realistic", str(args.events), "7"], stdout=f, check=True)
    size = big.stat().st_size
    print(f"# input: {args.events} events, {size / 1e6:.1f} MB")

    for mode in args.modes.split(","):
        def cli() -> None:
            with open(os.devnull, "wb") as out:
                subprocess.run([args.agui, "compact", "--mode", mode, "--to", "ndjson", str(big)],
                               stdout=out, stderr=subprocess.DEVNULL, check=True)

        def py() -> None:
            agui.compact_events(big.read_bytes(), mode, output="bytes")

        c, p = [], []
        for _ in range(3):
            c.append(best(cli, 1))
            p.append(best(py, 1))
        print(f"compact {mode} {args.events} events: agui CLI {min(c):.3f} s, "
              f"Python bytes path {min(p):.3f} s, ratio {min(p) / min(c):.2f}x")

    small_bytes = b"".join(big.read_bytes().splitlines(keepends=True)[: args.dict_events])
    events: List[Any] = agui.read_events(small_bytes)
    floor = best(lambda: json.loads(json.dumps(events)))
    comp = best(lambda: agui.compact_events(events, "deltas"))
    red = best(lambda: agui.reduce(events))
    comp_b = best(lambda: agui.compact_events(small_bytes, "deltas", output="bytes"))
    print(f"{args.dict_events} events as dicts: json.dumps+json.loads {floor:.3f} s; "
          f"compact_events (dicts in, dicts out) {comp:.3f} s = {comp / floor:.2f}x; "
          f"reduce (dicts in, dict out) {red:.3f} s = {red / floor:.2f}x; "
          f"compact_events bytes path {comp_b:.3f} s = {comp_b / floor:.2f}x")

    # Store.append, 1 writer, SQLite.
    lines = big.read_bytes().splitlines(keepends=True)[: args.append_events]
    batches = [b"".join(lines[i:i + 100]) for i in range(0, len(lines), 100)]
    dict_batches = [agui.read_events(b) for b in batches]

    def py_append(use_dicts: bool) -> float:
        db = tmp / f"py-{time.monotonic_ns()}.db"
        store = agui.Store(f"sqlite://{db}")
        t = time.perf_counter()
        for b in (dict_batches if use_dicts else batches):
            store.append("bench-w1", b)
        store.close()
        return len(lines) / (time.perf_counter() - t)

    def rust_append() -> float:
        db = tmp / f"rs-{time.monotonic_ns()}.db"
        out = subprocess.run([args.agui, "store", "bench", "--store", f"sqlite://{db}",
                              "--events", str(args.append_events), "--restore-runs", "2",
                              "--restore-run-len", "10", "--samples", "2"],
                             capture_output=True, text=True, check=True)
        m = re.search(r"append, 1 writer: (\d+) events/s", out.stdout + out.stderr)
        assert m, out.stdout + out.stderr
        return float(m.group(1))

    r, pb, pd = [], [], []
    for _ in range(3):
        r.append(rust_append())
        pb.append(py_append(False))
        pd.append(py_append(True))
    print(f"append 1 writer SQLite ({args.append_events} events, batches of 100): "
          f"Rust store bench {max(r):.0f} events/s; Python bytes {max(pb):.0f} events/s "
          f"({max(r) / max(pb):.2f}x slower); Python dicts {max(pd):.0f} events/s "
          f"({max(r) / max(pd):.2f}x slower)")


if __name__ == "__main__":
    main()
