// End-to-end counterpart of `agui reduce FILE`: read an NDJSON file,
// JSON.parse every line, run the official reducer (`transformChunks` then
// `defaultApplyEvents` of @ag-ui/client, no subscribers, production path)
// and write the final {messages, state} as JSON to standard output. Timed
// from outside, as a whole process, like `agui reduce`.
//
// usage: node bench-reduce-file.mjs <events.ndjson>
import { readFileSync, writeSync } from "node:fs";
import { defaultApplyEvents, transformChunks } from "@ag-ui/client";
import { from } from "rxjs";

delete process.env.NODE_ENV;
const events = readFileSync(process.argv[2], "utf8")
  .split("\n")
  .filter((line) => line.trim() !== "")
  .map((line) => JSON.parse(line));
const agent = { messages: [], state: {}, pendingInterrupts: [] };
const runInput = { threadId: "t", runId: "r", state: {}, messages: [], tools: [], context: [], forwardedProps: {} };
let messages = [];
let state = {};
defaultApplyEvents(runInput, transformChunks()(from(events)), agent, []).subscribe({
  next: (m) => {
    if (m.messages !== undefined) messages = m.messages;
    if (m.state !== undefined) state = m.state;
  },
  error: (e) => {
    console.error(e);
    process.exit(1);
  },
  complete: () => writeSync(1, JSON.stringify({ messages, state })),
});
