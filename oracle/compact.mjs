// Differential oracle for `agui compact`: the official `compactEvents`, and
// optionally the official pipeline (chunk expansion, verification, reducer)
// applied to the original stream, to the official output and to ours.
//
// stdin:  [{ "events": [...], "ours"?: [...], "reduce"?: bool, "verify"?: bool }, ...]
//         (with AGUI_ORACLE_LINES=1: one case per line, one result per line)
// stdout: [{ "official": [...],
//            "reduced"?, "reducedOfficial"?, "reducedOurs"?: {messages, state} | {error},
//            "verified"?, "verifiedOfficial"?, "verifiedOurs"?: bool }, ...]
import {
  compactEvents,
  defaultApplyEvents,
  transformChunks,
  verifyEvents,
} from "@ag-ui/client";
import { from, lastValueFrom, toArray } from "rxjs";

const readStdin = async () => {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
};

// The reducer as a client runs it: chunks expanded, then applied, from an
// empty agent. Events are cloned because the reducer writes through them.
const reduce = async (events) => {
  try {
    const agent = { messages: [], state: {} };
    const input = {
      threadId: "t",
      runId: "r",
      messages: [],
      tools: [],
      context: [],
      state: {},
      forwardedProps: {},
    };
    let messages = [];
    let state = {};
    const events$ = from(structuredClone(events)).pipe(transformChunks());
    const mutations = await lastValueFrom(
      defaultApplyEvents(input, events$, agent, []).pipe(toArray()),
    );
    for (const m of mutations) {
      if (m.messages !== undefined) messages = m.messages;
      if (m.state !== undefined) state = m.state;
    }
    return { messages, state };
  } catch (error) {
    return { error: String(error?.message ?? error) };
  }
};

const verify = async (events) => {
  try {
    await lastValueFrom(
      from(structuredClone(events)).pipe(transformChunks(), verifyEvents(), toArray()),
    );
    return true;
  } catch {
    return false;
  }
};

const runCase = async (c) => {
  const official = compactEvents(structuredClone(c.events));
  const r = { official };
  if (c.reduce) {
    r.reduced = await reduce(c.events);
    r.reducedOfficial = await reduce(official);
    if (c.ours) r.reducedOurs = await reduce(c.ours);
  }
  if (c.verify) {
    r.verified = await verify(c.events);
    r.verifiedOfficial = await verify(official);
    if (c.ours) r.verifiedOurs = await verify(c.ours);
  }
  return r;
};

if (process.env.AGUI_ORACLE_LINES === "1") {
  // One case per input line, one result per output line, as they come:
  // neither side holds the whole corpus.
  const { createInterface } = await import("node:readline");
  const { once } = await import("node:events");
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (line.length === 0) continue;
    const out = JSON.stringify(await runCase(JSON.parse(line))) + "\n";
    if (!process.stdout.write(out)) await once(process.stdout, "drain");
  }
} else {
  const cases = JSON.parse(await readStdin());
  const results = [];
  for (const c of cases) results.push(await runCase(c));
  process.stdout.write(JSON.stringify(results));
}
