"""The functions release the GIL while they work: another Python thread
keeps running during a long call (it would be frozen if the GIL were held)."""

from __future__ import annotations

import threading
import time

import agui


def _big_stream(runs: int) -> bytes:
    events = []
    for r in range(runs):
        events.append({"type": "RUN_STARTED", "threadId": "t", "runId": f"r{r}"})
        for m in range(20):
            mid = f"m{r}-{m}"
            events.append({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"})
            events += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": "word "}] * 10
            events.append({"type": "TEXT_MESSAGE_END", "messageId": mid})
        events.append({"type": "RUN_FINISHED", "threadId": "t", "runId": f"r{r}"})
    return agui.to_ndjson(events)


def test_another_thread_runs_during_a_long_call() -> None:
    data = _big_stream(400)  # about 100k events
    ticks = 0
    stop = False

    def spin() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1

    # Long enough for the measurement: the call takes well over the
    # interpreter's 5 ms switch interval.
    t = time.perf_counter()
    agui.compact_events(data, "deltas", output="bytes")
    alone = time.perf_counter() - t
    assert alone > 0.02

    worker = threading.Thread(target=spin)
    worker.start()
    time.sleep(0.01)
    before = ticks
    agui.compact_events(data, "deltas", output="bytes")
    during = ticks - before
    stop = True
    worker.join()
    # With the GIL held the spinning thread would get at most a tick or two
    # at the call's edges; released, it runs all along.
    assert during > 10_000, during
