// Differential oracle: the verdict of @ag-ui/core 1.0.0's zod schemas.
//
// stdin: a JSON array of cases, each {"kind": "event" | "input", "value": <JSON>}.
// stdout: a JSON array of results, one per case:
//   {"ok": true}
//   {"ok": false, "paths": [[key or index, ...], ...], "messages": [...]}
// "event" is checked with EventSchemas (the discriminated union of all 31
// event schemas), "input" with RunAgentInputSchema. Every issue is listed;
// for a union with no matching discriminator the path ends at the union, so
// the discriminator key is appended to it.
import { EventSchemas, RunAgentInputSchema } from "@ag-ui/core/schemas";

const input = JSON.parse(await readStdin());
process.stdout.write(JSON.stringify(input.map(check)));

function check({ kind, value }) {
  const schema = kind === "input" ? RunAgentInputSchema : EventSchemas;
  const result = schema.safeParse(value);
  if (result.success) return { ok: true };
  const paths = [];
  const messages = [];
  for (const issue of result.error.issues) {
    const path = issue.path.map((p) => (typeof p === "number" ? p : String(p)));
    if (issue.code === "invalid_union" && issue.discriminator !== undefined) {
      path.push(issue.discriminator);
    }
    paths.push(path);
    messages.push(issue.message);
  }
  return { ok: false, paths, messages };
}

function readStdin() {
  return new Promise((resolve, reject) => {
    let text = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (chunk) => (text += chunk));
    process.stdin.on("end", () => resolve(text));
    process.stdin.on("error", reject);
  });
}
