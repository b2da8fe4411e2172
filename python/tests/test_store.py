"""Stores from Python: append / read / restore / subscribe / tenant on the
memory, SQLite, file and PostgreSQL backends, and sharing a store with the
`agui` binary."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

import agui


def run(thread: str, run_id: str, text: str, parent: Any = None) -> List[Dict[str, Any]]:
    started: Dict[str, Any] = {"type": "RUN_STARTED", "threadId": thread, "runId": run_id}
    if parent:
        started["parentRunId"] = parent
    mid = f"{run_id}-m"
    return [
        started,
        {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": mid},
        {"type": "STATE_SNAPSHOT", "snapshot": {"last": run_id}},
        {"type": "RUN_FINISHED", "threadId": thread, "runId": run_id},
    ]


@pytest.fixture(params=["memory", "sqlite", "file", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = request.param
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite://{tmp_path}/agui.db"
    if kind == "file":
        return f"file://{tmp_path}/store"
    return str(request.getfixturevalue("pg_url"))


def test_append_read_restore_branch_tenant(url: str) -> None:
    with agui.Store(url) as store:
        a = store.append("t1", run("t1", "r1", "one"), expected_seq=0, agent="demo")
        assert a == {"first_seq": 1, "last_seq": 6}
        store.append("t1", run("t1", "r2", "two"), expected_seq=6)
        # r3 branches from r1: r2's message must not appear on its branch.
        store.append("t1", run("t1", "r3", "three", parent="r1"))
        with pytest.raises(agui.AguiStoreError) as info:
            store.append("t1", run("t1", "r4", "x"), expected_seq=6)
        assert info.value.kind == "conflict"

        page = store.read("t1", limit=5)
        assert [e["seq"] for e in page["events"]] == [1, 2, 3, 4, 5]
        assert page["next_after"] == 5
        rest = store.read("t1", after=page["next_after"], limit=1000)
        assert [e["seq"] for e in rest["events"]] == list(range(6, 19))
        assert rest["next_after"] is None
        all_events = store.events("t1")
        assert all_events == run("t1", "r1", "one") + run("t1", "r2", "two") + run("t1", "r3", "three", "r1")
        raw = store.read("t1", output="bytes", limit=1)["events"][0]["event"]
        assert raw == json.dumps(run("t1", "r1", "one")[0], separators=(",", ":")).encode()

        assert [e["event"]["type"] for e in store.read_run("t1", "r2")][0] == "RUN_STARTED"
        assert len(store.read_run("t1", "r2")) == 6
        branch = [e["seq"] for e in store.read_branch("t1", "r3")]
        assert branch == list(range(1, 7)) + list(range(13, 19))

        last = store.messages_at("t1")
        assert last["run_id"] == "r3"
        assert [m["content"] for m in last["messages"]] == ["one", "three"]
        assert last["state"] == {"last": "r3"}
        at_r2 = store.messages_at("t1", "r2")
        assert [m["content"] for m in at_r2["messages"]] == ["one", "two"]
        # The same answer as the history core over the thread's events.
        assert agui.history_at(all_events, "r2") == {"messages": at_r2["messages"], "state": at_r2["state"]}

        runs = store.runs("t1")["runs"]
        assert [r["run_id"] for r in runs] == ["r1", "r2", "r3"]
        assert runs[2]["parent_run_id"] == "r1" and runs[0]["status"] == "finished"
        threads = store.threads()["threads"]
        assert [t["thread_id"] for t in threads] == ["t1"] and threads[0]["agent"] == "demo"
        assert store.thread("t1")["last_seq"] == 18

    # Tenants do not see each other.
    other = agui.Store(url, tenant="other")
    try:
        with pytest.raises(agui.AguiStoreError) as info:
            other.read("t1")
        assert info.value.kind == "not_found"
        assert other.threads()["threads"] == []
        other.append("t1", run("t1", "x1", "mine"))
        assert [m["content"] for m in other.messages_at("t1")["messages"]] == ["mine"]
        other.delete("t1")
        with pytest.raises(agui.AguiStoreError):
            other.thread("t1")
    finally:
        other.close()


def test_reopen_keeps_everything(url: str) -> None:
    if url == "memory://":
        pytest.skip("memory:// keeps nothing by design")
    with agui.Store(url) as store:
        store.append("t", run("t", "r1", "kept"))
    with agui.Store(url) as store:
        assert [m["content"] for m in store.messages_at("t")["messages"]] == ["kept"]


def test_async_store_and_subscribe_without_gap_or_duplicate(url: str) -> None:
    async def main() -> None:
        store = await agui.AsyncStore.connect(url)
        await store.append("t", run("t", "r1", "one"))
        got: List[int] = []

        async def consume() -> None:
            sub = await store.subscribe("t", after=2)
            async for item in sub:
                got.append(item["seq"])
                if item["seq"] == 30:
                    await sub.aclose()
                    break

        task = asyncio.create_task(consume())
        for i in range(2, 6):
            await store.append("t", run("t", f"r{i}", str(i)))
            await asyncio.sleep(0)
        await asyncio.wait_for(task, 20)
        assert got == list(range(3, 31))
        assert (await store.read("t", after=29))["events"][0]["seq"] == 30
        assert [m["content"] for m in (await store.messages_at("t"))["messages"]] == ["one", "2", "3", "4", "5"]
        assert (await store.runs("t"))["runs"][-1]["run_id"] == "r5"
        await store.delete("t")
        await store.close()
        with pytest.raises(agui.AguiStoreError):
            await store.read("t")

    asyncio.run(main())


def _cli(agui_bin: Path, *args: str) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    return subprocess.run([str(agui_bin), *args], capture_output=True)


def test_sqlite_file_shared_with_the_cli(agui_bin: Path, tmp_path: Path) -> None:
    """Python writes, then `agui` reads the same SQLite file."""
    url = f"sqlite://{tmp_path}/shared.db"
    events = run("t", "r1", "from python") + run("t", "r2", "again")
    with agui.Store(url) as store:
        store.append("t", events)
    out = _cli(agui_bin, "store", "export", "--store", url, "--thread", "t")
    assert out.returncode == 0, out.stderr
    assert out.stdout == agui.to_ndjson(events)
    # And the other way: the CLI imports, Python restores.
    more = tmp_path / "more.ndjson"
    more.write_bytes(agui.to_ndjson(run("u", "q1", "from the cli")))
    out = _cli(agui_bin, "store", "import", "--store", url, str(more))
    assert out.returncode == 0, out.stderr
    with agui.Store(url) as store:
        assert store.messages_at("u")["messages"][0]["content"] == "from the cli"


def test_postgres_shared_with_the_cli_concurrently(agui_bin: Path, pg_url: str, tmp_path: Path) -> None:
    """Both processes hold the same PostgreSQL store open at once."""
    with agui.Store(pg_url) as store:
        store.append("t", run("t", "r1", "python"))
        f = tmp_path / "cli.ndjson"
        f.write_bytes(agui.to_ndjson(run("c", "k1", "cli")))
        out = _cli(agui_bin, "store", "import", "--store", pg_url, str(f))
        assert out.returncode == 0, out.stderr
        assert store.messages_at("c")["messages"][0]["content"] == "cli"
        store.append("t", run("t", "r2", "python again"))
        out = _cli(agui_bin, "store", "export", "--store", pg_url, "--thread", "t")
        assert out.returncode == 0, out.stderr
        assert out.stdout == agui.to_ndjson(run("t", "r1", "python") + run("t", "r2", "python again"))


def _serve(agui_bin: Path, url: str) -> "tuple[subprocess.Popen[bytes], str]":
    """`agui serve` on `url` with the demo agent; returns it and its base URL."""
    proc = subprocess.Popen(
        [str(agui_bin), "serve", "--store", url, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if "listening on http://" in line:
            return proc, "http://" + line.split("listening on http://")[1].split()[0].rstrip("/")
    proc.wait(timeout=30)
    raise AssertionError(f"agui serve exited with {proc.returncode} before listening")


def test_sqlite_file_has_one_writer_at_a_time_between_python_and_serve(agui_bin: Path, tmp_path: Path) -> None:
    """A Python store and `agui serve` never write one SQLite file at once:
    whichever opens second is refused with the file and the holder's pid,
    read-only CLI commands work meanwhile, and each sees what the other
    stored once it has closed."""
    import os
    import urllib.request

    db = tmp_path / "shared.db"
    url = f"sqlite://{db}"
    with agui.Store(url) as store:
        store.append("t", run("t", "r1", "python first"))
        refused = subprocess.run(
            [str(agui_bin), "serve", "--store", url, "--listen", "127.0.0.1:0"],
            capture_output=True,
            timeout=60,
        )
        assert refused.returncode != 0
        err = refused.stderr.decode()
        assert str(db) in err and f"(pid {os.getpid()})" in err, err
        out = _cli(agui_bin, "store", "export", "--store", url, "--thread", "t")
        assert out.returncode == 0, out.stderr
        assert out.stdout == agui.to_ndjson(run("t", "r1", "python first"))

    proc, base = _serve(agui_bin, url)
    try:
        with pytest.raises(agui.AguiStoreError) as refusal:
            agui.Store(url)
        assert str(db) in str(refusal.value) and f"(pid {proc.pid})" in str(refusal.value)
        body = json.dumps(
            {
                "threadId": "t",
                "runId": "r2",
                "parentRunId": "r1",
                "messages": [{"id": "u2", "role": "user", "content": "and serve"}],
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
        ).encode()
        request = urllib.request.Request(
            f"{base}/agents/demo/run",
            data=body,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            frames = response.read().decode()
        assert "RUN_FINISHED" in frames, frames
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    with agui.Store(url) as store:
        messages = store.messages_at("t")["messages"]
        assert messages[0]["content"] == "python first"
        assert any(m.get("content") == "and serve" for m in messages), messages
        after = [m["role"] for m in messages[messages.index(next(m for m in messages if m.get("content") == "and serve")) + 1 :]]
        assert "assistant" in after, messages


BIG = (
    b'{"type":"RUN_STARTED","threadId":"n","runId":"r1"}\n'
    b'{"type":"STATE_SNAPSHOT","snapshot":{"big":123456789012345678901234567890,"exact":1.50,"tiny":1e-400}}\n'
    b'{"type":"RUN_FINISHED","threadId":"n","runId":"r1"}\n'
)
NUMBERS = [b"123456789012345678901234567890", b"1.50", b"1e-400"]


def test_big_integers_and_exact_decimals_survive_the_bytes_path(url: str) -> None:
    # Numbers a float cannot hold keep their text through every bytes path:
    # conversion, compaction, reduction and a store round trip.
    outputs = [
        agui.to_ndjson(BIG),
        agui.to_sse(BIG),
        agui.compact_events(BIG, "deltas", output="bytes"),
        agui.compact_events(BIG, "snapshot", output="bytes"),
        agui.compact_events(BIG, "latest", output="bytes"),
        agui.reduce(BIG, output="bytes"),
    ]
    with agui.Store(url) as store:
        store.append("n", BIG, expected_seq=0)
        outputs.append(b"\n".join(e["event"] for e in store.read("n", output="bytes")["events"]))
    for out in outputs:
        for number in NUMBERS:
            assert number in out, (number, out[:300])


def test_ready_while_open_and_unavailable_after_close(url: str) -> None:
    store = agui.Store(url)
    store.ready()
    store.append("t", run("t", "r1", "hello"))
    store.ready()
    store.close()
    with pytest.raises(agui.AguiStoreError) as info:
        store.ready()
    assert info.value.kind == "unavailable"

    async def asynchronously() -> None:
        astore = await agui.AsyncStore.connect(url)
        await astore.ready()
        await astore.close()
        with pytest.raises(agui.AguiStoreError) as info:
            await astore.ready()
        assert info.value.kind == "unavailable"

    asyncio.run(asynchronously())
