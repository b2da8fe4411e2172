// Benchmark oracle: times the official reducer (`transformChunks` then
// `defaultApplyEvents` of @ag-ui/client 1.0.0) on one stream.
//
// stdin: {"events": [...], "runs": N}  (events as plain JSON; N timed runs, default 1)
// stdout: {"ms": [t1, ...], "messages": count, "stateBytes": n}
// Each run starts from no messages and state {}. Parsing stdin is not timed:
// the reducer's input is the parsed event objects. Events are cloned before
// each run because the official reducer mutates what it is given.
import { defaultApplyEvents, transformChunks } from "@ag-ui/client";
import { from } from "rxjs";

const input = JSON.parse(await readStdin());
const runs = input.runs ?? 1;
const times = [];
let last = { messages: [], state: {} };
for (let i = 0; i < runs; i++) {
  const events = structuredClone(input.events);
  const t0 = performance.now();
  last = await reduce(events);
  times.push(performance.now() - t0);
}
process.stdout.write(
  JSON.stringify({ ms: times, messages: last.messages.length, stateBytes: JSON.stringify(last.state).length }),
);

function reduce(events) {
  const agent = { messages: [], state: {}, pendingInterrupts: [] };
  const runInput = { threadId: "t", runId: "r", state: {}, messages: [], tools: [], context: [], forwardedProps: {} };
  let messages = [];
  let state = {};
  return new Promise((resolve, reject) => {
    defaultApplyEvents(runInput, transformChunks()(from(events)), agent, []).subscribe({
      next: (m) => {
        if (m.messages !== undefined) messages = m.messages;
        if (m.state !== undefined) state = m.state;
      },
      error: reject,
      complete: () => resolve({ messages, state }),
    });
  });
}

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    process.stdin.on("data", (c) => chunks.push(c));
    process.stdin.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    process.stdin.on("error", reject);
  });
}
