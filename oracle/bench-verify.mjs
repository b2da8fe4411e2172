// Benchmark counterpart of `agui verify`: read an NDJSON file, JSON.parse
// every line, run the official pipeline's checks (transformChunks then
// verifyEvents of @ag-ui/client, as `agui verify` does), print the verdict.
//
// usage: node bench-verify.mjs <events.ndjson>
import { readFileSync } from "node:fs";
import { transformChunks, verifyEvents } from "@ag-ui/client";
import { Subject } from "rxjs";

delete process.env.NODE_ENV;
const text = readFileSync(process.argv[2], "utf8");
const source = new Subject();
let count = 0;
let failure;
verifyEvents()(transformChunks()(source)).subscribe({
  next: () => count++,
  error: (e) => (failure ??= String(e && e.message ? e.message : e)),
});
let index = 0;
let from = 0;
while (from < text.length && failure === undefined) {
  let end = text.indexOf("\n", from);
  if (end < 0) end = text.length;
  if (end > from) {
    source.next(JSON.parse(text.slice(from, end)));
    index++;
  }
  from = end + 1;
}
source.complete();
process.stdout.write(failure ? `error at event #${index - 1}: ${failure}\n` : `ok (${index} events)\n`);
