"""Differential: on the generated corpus (every profile, invalid streams,
chunk soups), each function's bytes output equals what the `agui` CLI prints
for the same input, byte for byte; its dict output equals the parsed bytes;
and its errors agree with the CLI's verdicts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

import agui

COUNTS = {"streams": 0, "comparisons": 0}


def cli(agui_bin: Path, *args: str, stdin: Optional[bytes] = None) -> Tuple[int, bytes, bytes]:
    p = subprocess.run([str(agui_bin), *args], input=stdin, capture_output=True)
    return p.returncode, p.stdout, p.stderr


def same(a: bytes, b: bytes) -> None:
    COUNTS["comparisons"] += 1
    assert a == b


def run_ids(data: bytes) -> List[str]:
    try:
        return [r["runId"] for r in agui.run_tree(data)]
    except agui.AguiError:
        return []


def check_stream(agui_bin: Path, path: Path) -> None:
    data = path.read_bytes()
    COUNTS["streams"] += 1
    name = str(path)

    # convert: every format, bytes path; dicts equal the parsed stream.
    for fmt in ("ndjson", "json", "sse"):
        code, out, _ = cli(agui_bin, "convert", "--to", fmt, name)
        assert code == 0
        same(agui.read_events(data, output="bytes", to=fmt), out)
        same(agui.read_events(path, output="bytes", to=fmt), out)
    code, out, _ = cli(agui_bin, "convert", "--to", "sse", "--sse-ids", "7", name)
    same(agui.to_sse(data, first_id=7), out)
    events = agui.read_events(data)
    assert events == [json.loads(line) for line in data.splitlines() if line]
    # The dict path in, the bytes path out: the same events.
    assert [json.loads(x) for x in agui.to_ndjson(events).splitlines()] == events

    # verify
    code, out, _ = cli(agui_bin, "verify", name)
    if code == 0:
        assert agui.verify_events(data) == len(events)
        assert agui.verify_events(events) == len(events)
        assert agui.verify_all(data) == []
        same(f"ok ({len(events)} events)\n".encode(), out)
    else:
        with pytest.raises(agui.AguiVerifyError) as info:
            agui.verify_events(data)
        err = info.value
        same(f"error at event #{err.index} ({err.event_type}): {err.reason}\n".encode(), out)
        _, out_all, _ = cli(agui_bin, "verify", "--all", name)
        lines = [
            f"error at event #{p['index']} ({p['event_type']}): {p['reason']}"
            for p in agui.verify_all(data)
        ]
        n = len(lines)
        lines.append(f"{n} problem{'' if n == 1 else 's'}")
        same(("\n".join(lines) + "\n").encode(), out_all)

    # expand chunks
    code, out, _ = cli(agui_bin, "convert", "--to", "ndjson", "--expand-chunks", name)
    if code == 0:
        same(agui.expand_chunks(data, output="bytes"), out)
    else:
        with pytest.raises(agui.AguiError):
            agui.expand_chunks(data, output="bytes")

    # reduce
    code, out, _ = cli(agui_bin, "reduce", name)
    if code == 0:
        same(agui.reduce(data, output="bytes", pretty=True), out)
        assert agui.reduce(events) == json.loads(out)
    else:
        with pytest.raises(agui.AguiReduceError):
            agui.reduce(data)

    # compact, each mode (latest also per branch below)
    for mode in ("deltas", "snapshot", "latest"):
        code, out, _ = cli(agui_bin, "compact", "--mode", mode, "--to", "ndjson", name)
        if code == 0:
            same(agui.compact_events(data, mode, output="bytes"), out)
            assert agui.compact_events(events, mode) == [
                json.loads(x) for x in out.splitlines() if x
            ]
        else:
            with pytest.raises(agui.AguiError):
                agui.compact_events(data, mode, output="bytes")

    # run tree, time travel, branches, artifacts
    code, out, _ = cli(agui_bin, "history", "--tree", "--json", name)
    if code != 0:
        with pytest.raises(agui.AguiLineageError):
            agui.run_tree(data)
        return
    same(agui.run_tree(data, output="bytes"), out)
    runs = run_ids(data)
    for run in runs[-3:]:
        code, out, _ = cli(agui_bin, "history", "--at", run, name)
        if code == 0:
            same(agui.history_at(data, run, output="bytes", pretty=True), out)
        else:
            with pytest.raises(agui.AguiError):
                agui.history_at(data, run)
        code, out, _ = cli(agui_bin, "history", "--branch", run, "--to", "ndjson", name)
        if code == 0:
            same(agui.branch_events(data, run, output="bytes"), out)
        code, out, _ = cli(agui_bin, "history", "--at", run, "--event", "1", name)
        if code == 0:
            same(agui.history_at(data, run, 1, output="bytes", pretty=True), out)
        code, out, _ = cli(agui_bin, "compact", "--mode", "latest", "--branch", run,
                           "--to", "ndjson", name)
        if code == 0:
            same(agui.compact_events(data, "latest", run, output="bytes"), out)
        code, out, _ = cli(agui_bin, "export-artifact", "--run", run,
                           "--started-at", "2026-01-01T00:00:00Z",
                           "--finished-at", "2026-01-01T00:01:00Z", name)
        if code == 0:
            got = agui.export_artifact(data, run, started_at="2026-01-01T00:00:00Z",
                                       finished_at="2026-01-01T00:01:00Z",
                                       output="bytes", pretty=True)
            same(got, out)
            art = json.loads(out)
            assert agui.validate_artifact(out) == art
        else:
            with pytest.raises(agui.AguiArtifactError):
                agui.export_artifact(data, run, started_at="2026-01-01T00:00:00Z",
                                     finished_at="2026-01-01T00:01:00Z")


def test_every_function_matches_the_cli_on_the_corpus(agui_bin: Path, corpus: List[Path]) -> None:
    for path in corpus:
        check_stream(agui_bin, path)
    print(f"\ndifferential: {COUNTS['streams']} streams, {COUNTS['comparisons']} byte-for-byte comparisons")
    assert COUNTS["comparisons"] > 20 * len(corpus)


def test_reduce_from_a_start_matches_cli_from_input(agui_bin: Path, corpus: List[Path],
                                                      tmp_path: Path) -> None:
    start = {"messages": [{"id": "m0", "role": "user", "content": "earlier"}],
             "state": {"count": 1}}
    start_file = tmp_path / "input.json"
    start_file.write_text(json.dumps(start))
    checked = 0
    for path in corpus[:20]:
        code, out, _ = cli(agui_bin, "reduce", "--from-input", str(start_file), str(path))
        if code != 0:
            continue
        got = agui.reduce(path.read_bytes(), start["messages"], start["state"],
                          output="bytes", pretty=True)
        assert got == out
        for mode in ("snapshot", "latest"):
            code, out, _ = cli(agui_bin, "compact", "--mode", mode, "--from-input",
                               str(start_file), "--to", "ndjson", str(path))
            if code == 0:
                assert agui.compact_events(path.read_bytes(), mode, messages=start["messages"],
                                           state=start["state"], output="bytes") == out
        checked += 1
    assert checked > 5
