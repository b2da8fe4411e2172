// Differential oracle: the official SSE encoder (@ag-ui/encoder EventEncoder).
//
// stdin: a JSON array of cases; each case is an array of events (plain JSON).
// stdout: a JSON array of results, one per case:
//   {"frames": [F...], "payloads": [P...]}
// frames[k] is `new EventEncoder().encodeSSE(event_k)` exactly (a string), and
// payloads[k] is the JSON text inside that frame's `data: ` line, taken from
// the frame itself (the line between "data: " and the final blank line), so
// a decoder under test must return exactly payloads[k] for frames[k].
import { EventEncoder } from "@ag-ui/encoder";

const input = JSON.parse(await readStdin());
const encoder = new EventEncoder();
process.stdout.write(JSON.stringify(input.map(runCase)));

function runCase(events) {
  const frames = [];
  const payloads = [];
  for (const event of events) {
    const frame = encoder.encodeSSE(event);
    frames.push(frame);
    const prefix = "data: ";
    const suffix = "\n\n";
    if (!frame.startsWith(prefix) || !frame.endsWith(suffix)) {
      throw new Error(`unexpected frame shape: ${JSON.stringify(frame)}`);
    }
    payloads.push(frame.slice(prefix.length, frame.length - suffix.length));
  }
  return { frames, payloads };
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}
