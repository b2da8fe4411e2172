// Differential oracle: the official client pipeline's verdict on event streams.
//
// stdin: a JSON array of cases; each case is an array of events (plain JSON).
// stdout: a JSON array of results, one per case:
//   {"ok": true, "count": N}            every event accepted
//   {"ok": false, "index": I, "stage": S, "message": M}
// where I is the index (from 0) of the INPUT event whose processing raised the
// first error and S says which stage raised it: "schema" (enforceEvents),
// "chunks" (transformChunks) or "verify" (verifyEvents).
//
// The events go through the same operators, in the same order, as
// AbstractAgent.runAgent's pipeline: enforceEvents -> transformChunks ->
// verifyEvents. Every operator is synchronous, so the input index being pushed
// when an error surfaces is the event that caused it (an END that chunk
// expansion synthesizes is attributed to the event that triggered it).
import { enforceEvents, transformChunks, verifyEvents } from "@ag-ui/client";
import { Subject, tap } from "rxjs";

const input = JSON.parse(await readStdin());
const results = input.map(runCase);
process.stdout.write(JSON.stringify(results));

function runCase(events) {
  const source = new Subject();
  let current = -1;
  let stage = undefined;
  let failure = undefined;
  let count = 0;
  const enforced = enforceEvents()(source).pipe(
    tap({ error: () => (stage ??= "schema") }),
  );
  const expanded = transformChunks()(enforced).pipe(
    tap({ error: () => (stage ??= "chunks") }),
  );
  verifyEvents()(expanded).subscribe({
    next: () => count++,
    error: (e) => {
      failure = {
        ok: false,
        index: current,
        stage: stage ?? "verify",
        message: String(e && e.message ? e.message : e),
      };
    },
  });
  for (let i = 0; i < events.length && failure === undefined; i++) {
    current = i;
    try {
      source.next(events[i]);
    } catch (e) {
      failure = { ok: false, index: i, stage: "throw", message: String(e && e.message) };
    }
  }
  if (failure) return failure;
  source.complete();
  return { ok: true, count: events.length, emitted: count };
}

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    process.stdin.on("data", (c) => chunks.push(c));
    process.stdin.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    process.stdin.on("error", reject);
  });
}
