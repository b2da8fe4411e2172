// Differential oracle: the official chunk expansion (transformChunks) alone.
//
// stdin: a JSON array of cases; each case is an array of events (plain JSON).
// stdout: a JSON array of results, one per case:
//   {"ok": true, "events": [...], "from": [...]}
//   {"ok": false, "index": I, "message": M, "events": [...], "from": [...]}
// `events` are the expanded events in order (as JSON, with the key order the
// SDK produced) and `from[k]` is the index of the input event whose push
// produced events[k]. On error, I is the index of the input event that raised
// it, and `events` holds what was emitted before.
//
// No enforcement stage runs first, so unknown event types and unknown
// properties reach the expansion, which carries them through.
import { transformChunks } from "@ag-ui/client";
import { Subject } from "rxjs";

const input = JSON.parse(await readStdin());
process.stdout.write(JSON.stringify(input.map(runCase)));

function runCase(events) {
  const source = new Subject();
  let current = -1;
  const out = [];
  const from = [];
  let failure = undefined;
  transformChunks()(source).subscribe({
    next: (e) => {
      out.push(e);
      from.push(current);
    },
    error: (e) => {
      failure = { ok: false, index: current, message: String(e && e.message ? e.message : e) };
    },
  });
  for (let i = 0; i < events.length && failure === undefined; i++) {
    current = i;
    source.next(events[i]);
  }
  if (failure) return { ...failure, events: out, from };
  source.complete();
  return { ok: true, events: out, from };
}

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    process.stdin.on("data", (c) => chunks.push(c));
    process.stdin.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    process.stdin.on("error", reject);
  });
}
