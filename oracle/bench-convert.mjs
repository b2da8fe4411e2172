// Benchmark counterpart of `agui convert`: read an event stream (NDJSON, an
// SSE stream of `data:` frames, or a JSON array; detected from the first
// byte as `agui convert` does), JSON.parse and JSON.stringify every event,
// write it as SSE (`data: ...` frames), NDJSON or a JSON array to standard
// output.
//
// usage: node bench-convert.mjs <events file> sse|ndjson|json
import { readFileSync, writeSync } from "node:fs";

const [input, to = "sse"] = process.argv.slice(2);
const text = readFileSync(input, "utf8");
let out = [];
let written = 0;
const flush = () => {
  writeSync(1, out.join(""));
  out = [];
};
const put = (event) => {
  const json = JSON.stringify(event);
  if (to === "sse") out.push(`data: ${json}\n\n`);
  else if (to === "json") out.push(`${written === 0 ? "[\n" : ",\n"}${json}`);
  else out.push(`${json}\n`);
  written += 1;
  if (out.length === 10000) flush();
};
const first = text.trimStart()[0];
if (first === "[") {
  for (const event of JSON.parse(text)) put(event);
} else if (first === "{") {
  let from = 0;
  while (from < text.length) {
    let end = text.indexOf("\n", from);
    if (end < 0) end = text.length;
    if (end > from) put(JSON.parse(text.slice(from, end)));
    from = end + 1;
  }
} else {
  // SSE: frames end at a blank line; an event's data is its `data:` lines
  // joined with newlines.
  for (const frame of text.split(/\r?\n\r?\n/)) {
    const data = [];
    for (const line of frame.split(/\r?\n/)) {
      if (line.startsWith("data:")) data.push(line.slice(line[5] === " " ? 6 : 5));
    }
    if (data.length > 0) put(JSON.parse(data.join("\n")));
  }
}
if (to === "json") out.push(written === 0 ? "[]\n" : "\n]\n");
flush();
