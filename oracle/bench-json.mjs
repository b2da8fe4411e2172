// Benchmark baseline: Node's JSON.parse + JSON.stringify over an NDJSON file.
//
// stdin: {"path": "<file>", "repeat": N}
// stdout: {"events": E, "bytes": B, "runs_ms": [..]}: E events and B input
// bytes per run; each run reads the file, parses every line and stringifies
// it back into one output string per run (as a decoder + encoder would).
import { readFileSync } from "node:fs";

const { path, repeat = 1 } = JSON.parse(await readStdin());
const runs = [];
let events = 0;
let bytes = 0;
for (let r = 0; r < repeat; r++) {
  const start = process.hrtime.bigint();
  const text = readFileSync(path, "utf8");
  bytes = Buffer.byteLength(text);
  const out = [];
  let n = 0;
  let from = 0;
  while (from < text.length) {
    let end = text.indexOf("\n", from);
    if (end < 0) end = text.length;
    if (end > from) {
      out.push(JSON.stringify(JSON.parse(text.slice(from, end))));
      n++;
    }
    from = end + 1;
  }
  const joined = out.join("\n");
  if (joined.length === 0 && n > 0) throw new Error("nothing written");
  runs.push(Number(process.hrtime.bigint() - start) / 1e6);
  events = n;
}
process.stdout.write(JSON.stringify({ events, bytes, runs_ms: runs }));

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}
