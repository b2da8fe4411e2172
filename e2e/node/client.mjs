// End-to-end client for `agui serve`, built on the official @ag-ui/client
// HttpAgent (pinned in ../package.json). Reads a JSON plan from argv[2] and
// prints a JSON report on stdout. Every plan may name the client package in
// "client": "@ag-ui/client" (1.0.0, the default) or "ag-ui-client-0059"
// (@ag-ui/client 0.0.59 under an npm alias, the version CopilotKit's
// packages depend on). Plans:
//
//   {"op":"conversation","url":U,"threadId":T,"turns":[{"text":..,"runId"?:..,
//     "forwardedProps"?:..}],"thin"?:bool,"headers"?:{..}}
//     Holds a multi-turn conversation; with "thin" the agent's messages are
//     reset to just the new user message before each turn (a client that
//     sends only its new messages). Reports every turn's outcome and the
//     final {messages, state}.
//
//   {"op":"connect","url":U,"threadId":T,"headers"?:{..}}
//     Reconnects with connectAgent() through ConnectingHttpAgent (below),
//     whose connect() posts to the gateway's /connect route. Reports the
//     resulting {messages, state}.
//
//   {"op":"branch","url":U,"threadId":T,"parentRunId":P,"runId":R,
//     "messages":[..],"state":{..},"text":..}
//     Starts from the conversation as it was after run P (messages and
//     state, as GET /threads/{id}/messages?run=P gives them), adds a user
//     message and runs R with parentRunId P through BranchingHttpAgent
//     (below). Reports the turn's outcome and the final {messages, state}.
const plan = JSON.parse(process.argv[2]);
process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "1";
const { HttpAgent, runHttpRequest, transformHttpEventStream } = await import(plan.client ?? "@ag-ui/client");

// The few lines an app needs for AG-UI reconnect through the gateway: the
// official HttpAgent has no connect() of its own.
class ConnectingHttpAgent extends HttpAgent {
  connect(input) {
    const url = this.url.replace(/\/run$/, "/connect");
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url, this.requestInit(input))));
  }
}

// Branching: the official HttpAgent sends no parentRunId; this adds it to
// the request body.
class BranchingHttpAgent extends HttpAgent {
  constructor(config, parentRunId) {
    super(config);
    this.parentRunId = parentRunId;
  }
  requestInit(input) {
    return super.requestInit({ ...input, parentRunId: this.parentRunId });
  }
}
function snapshot(agent) {
  return { messages: agent.messages, state: agent.state };
}

async function conversation() {
  const agent = new HttpAgent({ url: plan.url, threadId: plan.threadId, headers: plan.headers ?? {} });
  const turns = [];
  let n = 0;
  for (const turn of plan.turns) {
    n += 1;
    if (plan.thin) agent.setMessages([]);
    agent.addMessage({ id: `${plan.threadId}-u${n}`, role: "user", content: turn.text });
    const errors = [];
    try {
      await agent.runAgent(
        { runId: turn.runId, forwardedProps: turn.forwardedProps ?? {} },
        { onRunErrorEvent: ({ event }) => { errors.push(event.code ?? event.message); } },
      );
      turns.push({ ok: errors.length === 0, errors });
    } catch (e) {
      turns.push({ ok: false, errors: [...errors, String(e?.message ?? e)] });
    }
  }
  return { turns, ...snapshot(agent) };
}

async function connect() {
  const agent = new ConnectingHttpAgent({ url: plan.url, threadId: plan.threadId, headers: plan.headers ?? {} });
  await agent.connectAgent({ runId: plan.runId });
  return snapshot(agent);
}

async function branch() {
  const agent = new BranchingHttpAgent(
    { url: plan.url, threadId: plan.threadId, headers: plan.headers ?? {}, initialMessages: plan.messages, initialState: plan.state ?? {} },
    plan.parentRunId,
  );
  agent.addMessage({ id: `${plan.threadId}-${plan.runId}-u`, role: "user", content: plan.text });
  const errors = [];
  let ok;
  try {
    await agent.runAgent(
      { runId: plan.runId },
      { onRunErrorEvent: ({ event }) => { errors.push(event.code ?? event.message); } },
    );
    ok = errors.length === 0;
  } catch (e) {
    ok = false;
    errors.push(String(e?.message ?? e));
  }
  return { turns: [{ ok, errors }], ...snapshot(agent) };
}

const ops = { conversation, connect, branch };
const op = ops[plan.op];
if (!op) {
  console.error(`unknown op ${plan.op}`);
  process.exit(2);
}
try {
  const out = await op();
  process.stdout.write(JSON.stringify(out));
} catch (e) {
  console.error(String(e?.stack ?? e));
  process.exit(1);
}
