// End-to-end client for `agui serve` as CopilotKit's runtime: CopilotKit's
// own client core (@copilotkit/core, pinned in ../package.json), unchanged,
// with its runtimeUrl pointed at the gateway's CopilotKit prefix. Reads a
// JSON plan from argv[2] and prints a JSON report on stdout. Plans:
//
//   {"op":"conversation","runtimeUrl":U,"agent":A,"threadId":T,"texts":[..]}
//     Discovers the agents through /info, then holds a conversation with
//     agent A on thread T through core.runAgent(). Reports {messages, state}.
//
//   {"op":"restore","runtimeUrl":U,"agent":A,"threadId":T}
//     A fresh core (a page reload): connects agent A to thread T through
//     core.connectAgent(). Reports {messages, state}.
//
//   {"op":"attach_and_stop","runtimeUrl":U,"agent":A,"threadId":T}
//     A fresh core attaches to the run in flight on T through connectAgent(),
//     waits until the streaming assistant message shows, stops the run with
//     core.stopAgent() (CopilotKit's stop button), and waits for the
//     connection to end. Reports {sawPartial, messages, state}.
const plan = JSON.parse(process.argv[2]);
process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "1";
// CopilotKit's core talks to its runtime only in a browser (it checks for
// `window`); Node's fetch stands in for the browser's here.
globalThis.window ??= globalThis;
const { CopilotKitCore } = await import("@copilotkit/core");

const errors = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function agentOf(core) {
  for (let i = 0; i < 200; i++) {
    const agent = core.getAgent(plan.agent);
    if (agent) return agent;
    await sleep(50);
  }
  throw new Error(`agent ${plan.agent} not discovered through ${plan.runtimeUrl}/info (status ${core.runtimeConnectionStatus}; errors: ${errors.join("; ")})`);
}

async function fresh() {
  const core = new CopilotKitCore({ runtimeUrl: plan.runtimeUrl, headers: plan.headers ?? {} });
  core.subscribe({ onError: ({ code, error }) => { errors.push(`${code}: ${error?.message ?? error}`); } });
  const agent = await agentOf(core);
  agent.threadId = plan.threadId;
  return { core, agent };
}

function snapshot(agent) {
  return { messages: agent.messages, state: agent.state };
}

async function conversation() {
  const { core, agent } = await fresh();
  let n = 0;
  for (const text of plan.texts) {
    n += 1;
    agent.addMessage({ id: `${plan.threadId}-ck-u${n}`, role: "user", content: text });
    await core.runAgent({ agent });
  }
  return snapshot(agent);
}

async function restore() {
  const { core, agent } = await fresh();
  await core.connectAgent({ agent });
  return snapshot(agent);
}

async function attachAndStop() {
  const { core, agent } = await fresh();
  const connected = core.connectAgent({ agent });
  let sawPartial = false;
  for (let i = 0; i < 400 && !sawPartial; i++) {
    sawPartial = agent.messages.some((m) => m.role === "assistant" && typeof m.content === "string" && m.content.length > 0);
    if (!sawPartial) await sleep(25);
  }
  core.stopAgent({ agent });
  await Promise.race([connected, sleep(15000).then(() => { throw new Error("the connection did not end after the stop"); })]);
  return { sawPartial, ...snapshot(agent) };
}

const ops = { conversation, restore, attach_and_stop: attachAndStop };
const op = ops[plan.op];
if (!op) {
  console.error(`unknown op ${plan.op}`);
  process.exit(2);
}
try {
  const out = await op();
  process.stdout.write(JSON.stringify(out));
  process.exit(0);
} catch (e) {
  console.error(String(e?.stack ?? e));
  process.exit(1);
}
