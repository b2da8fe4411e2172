// Benchmark counterpart of `agui compact`: the official `compactEvents`,
// end to end on one file: read, parse, compact, write.
//
// usage: node bench-compact.mjs <events.ndjson|events.json> [out]
// Writes NDJSON to `out` (default: standard output); prints a one-line
// summary (events in/out, milliseconds per phase) on standard error.
import { readFileSync, writeFileSync, openSync, writeSync, closeSync } from "node:fs";
import { compactEvents } from "@ag-ui/client";

const [input, output] = process.argv.slice(2);
if (!input) {
  console.error("usage: node bench-compact.mjs <events.ndjson|events.json> [out]");
  process.exit(2);
}
const t0 = performance.now();
const text = readFileSync(input, "utf8");
const t1 = performance.now();
let events;
if (text.trimStart().startsWith("[")) {
  events = JSON.parse(text);
} else {
  events = [];
  for (const line of text.split("\n")) {
    if (line.trim() !== "") events.push(JSON.parse(line));
  }
}
const t2 = performance.now();
const compacted = compactEvents(events);
const t3 = performance.now();
const fd = output ? openSync(output, "w") : 1;
// Written in slices so no single string exceeds V8's limit.
let buffer = [];
for (const event of compacted) {
  buffer.push(JSON.stringify(event));
  if (buffer.length === 10000) {
    writeSync(fd, buffer.join("\n") + "\n");
    buffer = [];
  }
}
if (buffer.length > 0) writeSync(fd, buffer.join("\n") + "\n");
if (output) closeSync(fd);
const t4 = performance.now();
console.error(
  `node compactEvents: ${events.length} events in -> ${compacted.length} out; ` +
    `read ${(t1 - t0).toFixed(0)} ms, parse ${(t2 - t1).toFixed(0)} ms, ` +
    `compact ${(t3 - t2).toFixed(0)} ms, write ${(t4 - t3).toFixed(0)} ms`,
);
