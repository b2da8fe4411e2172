// Benchmark oracle: times the official reducer (`transformChunks` then
// `defaultApplyEvents` of @ag-ui/client 1.0.0) on one stream.
//
// stdin: {"events": [...], "runs": N, "budgetMs": B}
//   events as plain JSON; N timed runs (default 1); B an optional time budget
//   per run in milliseconds.
// stdout: {"ms": [t1, ...], "messages": count, "stateBytes": n,
//          "processed": k, "finished": bool}
//
// What is timed is exactly what a client pays: `transformChunks()(from(events))`
// piped into `defaultApplyEvents(input, events$, agent, subscribers)`, from
// the first event to completion, and nothing else:
// - Parsing stdin is not timed: the reducer's input is the parsed event
//   objects, as in a client.
// - Events are cloned before each run (the official reducer mutates what it
//   is given, e.g. it keeps the event's message objects), outside the timer.
// - NODE_ENV is removed, so the reducer takes its production path (no
//   freezing, no clone of the inputs for subscribers).
// - Without a budget there are no subscribers (the default agent has none).
//   With a budget, one subscriber counts the events the reducer has reached
//   and, once the budget is spent, stops the propagation of the remaining
//   events (each then costs a few microseconds), so a run that would take
//   hours reports how far it got: `finished: false`, `processed` = events
//   reached within the budget (input events, by position), `ms` = the time
//   at which it stopped. Its
//   `onEvent` returns nothing until then, which the reducer treats as no
//   change (one function call and one await per event: microseconds, against
//   milliseconds per event for the reducer itself at these sizes).
import { defaultApplyEvents, transformChunks } from "@ag-ui/client";
import { from } from "rxjs";

delete process.env.NODE_ENV;

const input = JSON.parse(await readStdin());
const runs = input.runs ?? 1;
const budgetMs = typeof input.budgetMs === "number" ? input.budgetMs : undefined;
const times = [];
let last = { messages: [], state: {}, processed: 0, finished: true };
for (let i = 0; i < runs; i++) {
  const events = structuredClone(input.events);
  // Input position of each event object (pass-through events keep their
  // identity through transformChunks; synthesized ones are not counted).
  const positions = budgetMs === undefined ? undefined : new Map(events.map((e, k) => [e, k]));
  const t0 = performance.now();
  last = await reduce(events, t0, positions);
  times.push(last.stoppedAt !== undefined ? last.stoppedAt - t0 : performance.now() - t0);
}
process.stdout.write(
  JSON.stringify({
    ms: times,
    messages: last.messages.length,
    stateBytes: JSON.stringify(last.state ?? null).length,
    processed: last.processed,
    finished: last.finished,
  }),
);

function reduce(events, t0, positions) {
  const agent = { messages: [], state: {}, pendingInterrupts: [] };
  const runInput = { threadId: "t", runId: "r", state: {}, messages: [], tools: [], context: [], forwardedProps: {} };
  let messages = [];
  let state = {};
  // Input events the reducer has reached (counted only with a budget).
  let reached = 0;
  let stoppedAt;
  const subscribers = [];
  if (budgetMs !== undefined) {
    subscribers.push({
      onEvent({ event }) {
        if (stoppedAt !== undefined) return { stopPropagation: true };
        const now = performance.now();
        if (now - t0 > budgetMs) {
          stoppedAt = now;
          return { stopPropagation: true };
        }
        const k = positions.get(event);
        if (k !== undefined && k + 1 > reached) reached = k + 1;
        return undefined;
      },
    });
  }
  return new Promise((resolve, reject) => {
    defaultApplyEvents(runInput, transformChunks()(from(events)), agent, subscribers).subscribe({
      next: (m) => {
        if (m.messages !== undefined) messages = m.messages;
        if (m.state !== undefined) state = m.state;
      },
      error: reject,
      complete: () =>
        resolve({
          messages,
          state,
          stoppedAt,
          finished: stoppedAt === undefined,
          processed: budgetMs === undefined ? events.length : reached,
        }),
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
