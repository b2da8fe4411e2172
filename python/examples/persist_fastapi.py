"""Persist an existing AG-UI endpoint (here pydantic-ai's adapter on FastAPI):
every event stored before it is sent, ids on frames, history routes."""

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic_ai import Agent
from pydantic_ai.ui.ag_ui import AGUIAdapter

import agui
from agui.server import AguiPersistence, persist

agent = Agent("test")
api = FastAPI()


@api.post("/agents/demo/run")
async def run(request: Request) -> Response:
    return await AGUIAdapter.dispatch_request(request, agent=agent)


app: AguiPersistence = persist(
    api, agui.AsyncStore("sqlite:///agui.db"), run_path="/agents/demo/run"
)
# uvicorn persist_fastapi:app  ->  POST /agents/demo/run, POST /agents/demo/connect,
# GET /threads/{id}/messages, GET /threads/{id}/events (Last-Event-ID)
