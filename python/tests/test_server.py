"""The persistence helper end to end: a real pydantic-ai agent (offline
FunctionModel) on FastAPI, wrapped by `agui.server.persist`, driven by the
official TypeScript `HttpAgent` (e2e/node/client.mjs, installed by
scripts/e2e-setup) and by raw HTTP for the drop-and-resume case."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("pydantic_ai")

import agui  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
E2E = Path(os.environ.get("AGUI_E2E_DIR", ROOT / "e2e"))
APP = Path(__file__).with_name("e2e_app.py")


class App:
    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self.proc: Optional[subprocess.Popen] = None  # type: ignore[type-arg]
        self.port = 0

    def start(self) -> "App":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, str(APP), str(self.port), self.store_url])
        for _ in range(300):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the app exited at start-up: {self.proc.returncode}")
                time.sleep(0.1)
        raise RuntimeError("the app did not start listening")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """One app for the module (each test uses threads of its own)."""
    a = App(f"sqlite://{tmp_path_factory.mktemp('e2e')}/e2e.db").start()
    yield a
    a.stop()


def node(plan: Dict[str, Any]) -> Dict[str, Any]:
    if not (E2E / "node_modules/@ag-ui/client/package.json").is_file():
        pytest.fail("the official @ag-ui/client is missing; run scripts/e2e-setup")
    nodejs = shutil.which("node")
    assert nodejs, "node is not installed"
    out = subprocess.run([nodejs, str(E2E / "node/client.mjs"), json.dumps(plan)],
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    result: Dict[str, Any] = json.loads(out.stdout)
    return result


def frames(body: bytes) -> List[Tuple[Optional[int], Dict[str, Any]]]:
    out: List[Tuple[Optional[int], Dict[str, Any]]] = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        seq: Optional[int] = None
        data = []
        for line in block.split("\n"):
            if line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("data: "):
                data.append(line[6:])
        out.append((seq, json.loads("\n".join(data))))
    return out


def test_http_agent_conversation_equals_stored_messages_and_survives_a_restart(app: App) -> None:
    thread = "py-e2e-1"
    report = node({
        "op": "conversation", "url": f"{app.base}/agents/e2e/run", "threadId": thread,
        "turns": [{"text": "hello there"}, {"text": "please use the tool"}, {"text": "bye now"}],
    })
    assert all(t["ok"] for t in report["turns"]), report["turns"]
    texts = [m.get("content") for m in report["messages"]]
    assert "Echo: hello there" in texts and "Tool said: PLEASE USE THE TOOL" in texts
    stored = httpx.get(f"{app.base}/threads/{thread}/messages").json()
    assert stored["messages"] == report["messages"]

    # Every frame sent carried its thread sequence, and the store holds them.
    events = frames(httpx.get(f"{app.base}/threads/{thread}/events").content)
    assert [s for s, _ in events] == list(range(1, len(events) + 1))
    agui.verify_events([e for _, e in events])
    assert agui.reduce([e for _, e in events])["messages"] == report["messages"]

    app.stop()
    app.start()
    again = httpx.get(f"{app.base}/threads/{thread}/messages").json()
    assert again == stored
    connected = node({"op": "connect", "url": f"{app.base}/agents/e2e/run", "threadId": thread})
    assert connected["messages"] == report["messages"]
    # And the conversation goes on after the restart.
    more = node({"op": "conversation", "url": f"{app.base}/agents/e2e/run", "threadId": thread,
                 "turns": [{"text": "still there"}], "thin": True})
    assert more["turns"][0]["ok"]
    final = httpx.get(f"{app.base}/threads/{thread}/messages").json()["messages"]
    assert final[-1]["content"] == "Echo: still there"


def _run_input(thread: str, run_id: str, text: str) -> Dict[str, Any]:
    return {"threadId": thread, "runId": run_id, "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": f"{run_id}-u", "role": "user", "content": text}]}


def test_a_client_that_drops_mid_run_resumes_with_last_event_id(app: App) -> None:
    thread = "py-e2e-drop"
    got: List[Tuple[Optional[int], Dict[str, Any]]] = []
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{app.base}/agents/e2e/run",
                           json=_run_input(thread, "r1", "a slow answer with many words in it")) as r:
            assert r.status_code == 200
            buf = b""
            for chunk in r.iter_bytes():
                buf += chunk
                done, _, buf = buf.rpartition(b"\n\n")
                if done:
                    got += frames(done + b"\n\n")
                if len(got) >= 4:
                    break  # the client goes away mid-run
    last = got[-1][0]
    assert last is not None and got[-1][1]["type"] != "RUN_FINISHED"
    resumed = frames(httpx.get(f"{app.base}/threads/{thread}/events",
                               headers={"Last-Event-ID": str(last)}, timeout=30).content)
    assert resumed[0][0] == last + 1
    whole = got + resumed
    assert [s for s, _ in whole] == list(range(1, len(whole) + 1))
    assert whole[-1][1]["type"] == "RUN_FINISHED"
    everything = frames(httpx.get(f"{app.base}/threads/{thread}/events").content)
    assert everything == whole
    messages = httpx.get(f"{app.base}/threads/{thread}/messages").json()["messages"]
    assert messages[-1]["content"] == "Echo: a slow answer with many words in it"


@pytest.mark.parametrize("how,code", [("garbage", "upstream_garbage"),
                                      ("invalid", "upstream_protocol"),
                                      ("cut", "upstream_closed")])
def test_bad_upstream_events_close_the_run_as_the_gateway_does(app: App, how: str, code: str) -> None:
    thread = f"py-e2e-bad-{how}"
    body = httpx.post(f"{app.base}/agents/bad/run", json=_run_input(thread, "r1", how), timeout=30).content
    sent = frames(body)
    types = [e["type"] for _, e in sent]
    assert types == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                     "TEXT_MESSAGE_END", "RUN_ERROR"]
    assert sent[-1][1]["code"] == code
    stored = frames(httpx.get(f"{app.base}/threads/{thread}/events").content)
    assert stored == sent
    agui.verify_events([e for _, e in stored])
    runs = httpx.get(f"{app.base}/threads/{thread}/messages").json()
    assert [m["content"] for m in runs["messages"]] == [how, "partial"]


def test_history_routes_errors(app: App) -> None:
    r = httpx.get(f"{app.base}/threads/absent/messages")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(f"{app.base}/threads/absent/events", headers={"Last-Event-ID": "x"})
    assert r.status_code == 400
    r = httpx.post(f"{app.base}/agents/e2e/run", content=b"not json")
    assert r.status_code == 400
