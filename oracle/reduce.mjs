// Differential oracle: the official reducer, i.e. `transformChunks` followed by
// `defaultApplyEvents` of @ag-ui/client 1.0.0, called directly (no
// enforcement, no verification), as the agui reducer defines it.
//
// stdin: a JSON array of cases {"events": [...], "messages": [...], "state": ...}
//   (with AGUI_ORACLE_LINES=1: one case per line in, one result per line out)
//   (`messages` and `state` are the starting point; absent means [] and {}).
// stdout: a JSON array of results, one per case:
//   {"ok": true, "messages": [...], "state": ..., "pendingInterrupts": [...],
//    "outcome": null | {"type": "success", "result"?: ..., "pendingToolCallIds": [...]}
//                    | {"type": "interrupt"} | {"type": "cancelled"}}
//   {"ok": false, "message": M}  when the pipeline throws.
// `messages` and `state` are the last values the reducer emitted (what
// `runAgent` assigns to the agent), or the starting point when it emitted none.
import { defaultApplyEvents, transformChunks } from "@ag-ui/client";
import { from } from "rxjs";

if (process.env.AGUI_ORACLE_LINES === "1") {
  // One case per input line, one result per output line, as they come:
  // neither side holds the whole corpus.
  await eachLine(runCase);
} else {
  const input = JSON.parse(await readStdin());
  const results = [];
  for (const c of input) results.push(await runCase(c));
  process.stdout.write(JSON.stringify(results));
}

async function eachLine(handle) {
  const { createInterface } = await import("node:readline");
  const { once } = await import("node:events");
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (line.length === 0) continue;
    const out = JSON.stringify(await handle(JSON.parse(line))) + "\n";
    if (!process.stdout.write(out)) await once(process.stdout, "drain");
  }
}

async function runCase(c) {
  const startMessages = c.messages ?? [];
  const startState = c.state === undefined ? {} : c.state;
  const agent = { messages: startMessages, state: startState, pendingInterrupts: [] };
  const runInput = {
    threadId: "thread",
    runId: "run",
    state: startState,
    messages: [],
    tools: [],
    context: [],
    forwardedProps: {},
  };
  let messages = structuredClone(startMessages);
  let state = structuredClone(startState);
  let outcome = null;
  const recorder = {
    onRunFinishedEvent: (p) => {
      if (p.outcome === "success") {
        outcome = { type: "success", pendingToolCallIds: p.pendingToolCallIds };
        if (p.result !== undefined) outcome.result = p.result;
      } else {
        outcome = { type: p.outcome };
      }
    },
  };
  const failure = await new Promise((resolve) => {
    defaultApplyEvents(runInput, transformChunks()(from(c.events)), agent, [recorder]).subscribe({
      next: (m) => {
        if (m.messages !== undefined) messages = m.messages;
        if (m.state !== undefined) state = m.state;
      },
      error: (e) => resolve(String(e && e.message ? e.message : e)),
      complete: () => resolve(undefined),
    });
  });
  if (failure !== undefined) return { ok: false, message: failure };
  return {
    ok: true,
    messages,
    state,
    pendingInterrupts: structuredClone(agent.pendingInterrupts),
    outcome: outcome === null ? null : structuredClone(outcome),
  };
}

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    process.stdin.on("data", (c) => chunks.push(c));
    process.stdin.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    process.stdin.on("error", reject);
  });
}
