// Benchmark counterpart of `agui convert`: read an NDJSON file, JSON.parse
// and JSON.stringify every line, write it as SSE (`data: ...` frames) or
// NDJSON to standard output.
//
// usage: node bench-convert.mjs <events.ndjson> sse|ndjson
import { readFileSync, writeSync } from "node:fs";

const [input, to = "sse"] = process.argv.slice(2);
const text = readFileSync(input, "utf8");
let out = [];
let from = 0;
const flush = () => {
  writeSync(1, out.join(""));
  out = [];
};
while (from < text.length) {
  let end = text.indexOf("\n", from);
  if (end < 0) end = text.length;
  if (end > from) {
    const json = JSON.stringify(JSON.parse(text.slice(from, end)));
    out.push(to === "sse" ? `data: ${json}\n\n` : `${json}\n`);
    if (out.length === 10000) flush();
  }
  from = end + 1;
}
flush();
