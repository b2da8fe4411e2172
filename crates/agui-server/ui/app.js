// The agui console. Plain JavaScript, no build step, no dependencies.
//
// Rules kept throughout this file:
// - Data is never markup: every string from the API reaches the page through
//   textContent, attribute values or form values, never innerHTML. The page's
//   Content-Security-Policy forbids inline script and eval as a second wall.
// - Everything is read through the public HTTP API (docs/server.md) with the
//   bearer token kept in session storage.

const TOKEN_KEY = "agui.token";
const THEME_KEY = "agui.theme";
const PAGE = 100; // threads per page
const LOG_PAGE = 100; // events per log page

// ---------------------------------------------------------------- DOM helpers

/** Creates an element. `props`: className, text, dataset, attrs, on*. */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "className") el.className = v;
    else if (k === "text") el.textContent = String(v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "attrs") for (const [a, av] of Object.entries(v)) el.setAttribute(a, String(av));
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el[k] = v;
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function s(tag, attrs = {}) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

const main = () => document.getElementById("main");

// ---------------------------------------------------------------- formatting

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function age(iso) {
  if (!iso) return "";
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (s < 60) return `${Math.max(0, Math.round(s))}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

function time(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

function duration(a, b) {
  if (!a || !b) return "";
  const ms = Date.parse(b) - Date.parse(a);
  if (!(ms >= 0)) return "";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function short(id, n = 14) {
  const t = String(id ?? "");
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

// ---------------------------------------------------------------- API

class AuthNeeded extends Error {}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

async function api(path, init = {}) {
  const headers = new Headers(init.headers ?? {});
  const t = token();
  if (t) headers.set("Authorization", `Bearer ${t}`);
  if (!headers.has("Accept")) headers.set("Accept", "application/json");
  const res = await fetch(path, { ...init, headers });
  if (res.status === 401) {
    if (t) sessionStorage.removeItem(TOKEN_KEY);
    showLogin(t ? "That token was refused." : null);
    throw new AuthNeeded();
  }
  return res;
}

async function json(path, init) {
  const res = await api(path, init);
  const body = await res.json().catch(() => null);
  if (!res.ok) {
    const msg = body?.error?.message ?? `HTTP ${res.status}`;
    throw new Error(msg);
  }
  return body;
}

const enc = encodeURIComponent;

/** Reads an SSE response body, calling `onFrame({id, data})` per frame. */
async function readSse(res, onFrame, signal) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    if (signal?.aborted) break;
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut).replace(/^\r?\n\r?\n/, "");
      let id = null;
      const data = [];
      for (const line of frame.split(/\r?\n/)) {
        if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onFrame({ id, data: data.join("\n") });
    }
  }
}

// ---------------------------------------------------------------- chrome

function showLogin(problem) {
  stopTimers();
  const input = h("input", {
    type: "password", id: "token", autocomplete: "off", required: true,
    attrs: { "aria-label": "Bearer token" },
  });
  const form = h("form", { className: "login", onsubmit: (e) => {
    e.preventDefault();
    if (!input.value) return;
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    route();
  } },
    h("h1", { text: "Token required" }),
    h("p", { text: "This gateway requires a bearer token. It is kept in this tab's session storage only." }),
    problem ? h("p", { className: "error", text: problem }) : null,
    h("label", { htmlFor: "token", text: "Token" }), input,
    h("button", { type: "submit", id: "token-submit", text: "Open" }));
  clear(main()).append(form);
  input.focus();
}

function showError(where, err) {
  if (err instanceof AuthNeeded) return;
  clear(where).append(h("p", { className: "error", text: String(err?.message ?? err) }));
}

function applyTheme() {
  const t = localStorage.getItem(THEME_KEY);
  if (t) document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
}

let timers = [];
let aborts = [];
function every(ms, fn) {
  timers.push(setInterval(fn, ms));
}
function stopTimers() {
  for (const t of timers) clearInterval(t);
  for (const a of aborts) a.abort();
  timers = [];
  aborts = [];
}

function navigate(url, replace = false) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  route();
}

function route() {
  stopTimers();
  document.getElementById("forget").hidden = !token();
  const path = location.pathname;
  const m = path.match(/^\/ui\/threads\/([^/]+)$/);
  if (m) return threadView(decodeURIComponent(m[1]));
  return threadsView();
}

// ---------------------------------------------------------------- 1. threads

function threadsView() {
  const params = new URLSearchParams(location.search);
  const agent = h("input", { type: "search", id: "agent-filter", placeholder: "agent", value: params.get("agent") ?? "",
    attrs: { "aria-label": "Filter by agent" } });
  const prefix = h("input", { type: "search", id: "prefix", placeholder: "thread id prefix", value: params.get("prefix") ?? "",
    attrs: { "aria-label": "Search by thread id prefix" } });
  const list = h("div", { className: "threads", id: "threads", attrs: { role: "list" }, dataset: { agui: "threads" } });
  const more = h("button", { type: "button", id: "more", text: "Load more", hidden: true });
  const status = h("p", { className: "muted", id: "threads-status" });
  const form = h("form", { className: "filters", onsubmit: (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    if (agent.value) q.set("agent", agent.value);
    if (prefix.value) q.set("prefix", prefix.value);
    navigate(`/ui/${q.size ? `?${q}` : ""}`, true);
  } }, agent, prefix, h("button", { type: "submit", text: "Apply" }));
  const header = h("div", { className: "row head", attrs: { role: "presentation" } },
    h("span", { text: "thread" }), h("span", { text: "latest run" }), h("span", { text: "runs" }),
    h("span", { text: "size" }), h("span", { text: "active" }));
  clear(main()).append(h("section", { className: "list-view" }, h("h1", { text: "Threads" }), form, header, list, more, status));
  document.title = "Threads · agui console";

  const rows = new Map(); // threadId → row element
  let cursor = null;
  const query = (c) => {
    const q = new URLSearchParams({ limit: String(PAGE), include: "latestRun" });
    if (agent.value) q.set("agent", agent.value);
    if (prefix.value) q.set("prefix", prefix.value);
    if (c) q.set("cursor", c);
    return `/threads?${q}`;
  };
  const row = (t) => {
    const st = t.latestRun?.status ?? "none";
    const link = h("a", { href: `/ui/threads/${enc(t.threadId)}`, className: "tid", text: t.threadId,
      onclick: (e) => { if (!e.ctrlKey && !e.metaKey) { e.preventDefault(); navigate(link.getAttribute("href")); } } });
    return h("div", { className: "row", attrs: { role: "listitem" }, dataset: { threadId: t.threadId, updated: t.updatedAt ?? "" } },
      link,
      h("span", {}, h("span", { className: `badge st-${st}`, text: st })),
      h("span", { text: String(t.runCount) }),
      h("span", { text: bytes(t.bytes ?? 0) }),
      h("span", { className: "age", text: age(t.updatedAt), title: time(t.updatedAt), dataset: { at: t.updatedAt ?? "" } }));
  };
  // A search answers after looking at up to 100,000 threads; with none found
  // so far and more to look at, "Load more" goes on searching.
  const listStatus = () => rows.size ? `${rows.size} thread${rows.size === 1 ? "" : "s"} shown`
    : cursor ? "No match among the threads searched so far." : prefix.value || agent.value ? "No matching threads." : "No threads yet.";
  const load = async () => {
    try {
      const page = await json(query(cursor));
      for (const t of page.threads) {
        if (rows.has(t.threadId)) continue;
        const r = row(t);
        rows.set(t.threadId, r);
        list.append(r);
      }
      cursor = page.nextCursor;
      more.hidden = !cursor;
      status.textContent = listStatus();
    } catch (e) { showError(status, e); }
  };
  more.addEventListener("click", load);
  // New activity: the first page again, newest first; changed rows move up.
  const refresh = async () => {
    try {
      const page = await json(query(null));
      let anchor = null;
      for (const t of page.threads) {
        const old = rows.get(t.threadId);
        if (old && old.dataset.updated === (t.updatedAt ?? "")) { anchor = old; continue; }
        const r = row(t);
        if (old) old.replaceWith(r);
        rows.set(t.threadId, r);
        if (anchor) anchor.after(r); else list.prepend(r);
        anchor = r;
      }
      for (const a of list.querySelectorAll(".age")) a.textContent = age(a.dataset.at);
      status.textContent = listStatus();
    } catch (e) { showError(status, e); }
  };
  load();
  every(2000, refresh);
  list.addEventListener("keydown", (e) => listKeys(e, list, "a.tid"));
}

/** Up/Down/Home/End between the focusable items of a list. */
function listKeys(e, list, selector) {
  const items = [...list.querySelectorAll(selector)];
  const i = items.indexOf(document.activeElement);
  let j = null;
  if (e.key === "ArrowDown") j = Math.min(items.length - 1, i + 1);
  else if (e.key === "ArrowUp") j = Math.max(0, i - 1);
  else if (e.key === "Home") j = 0;
  else if (e.key === "End") j = items.length - 1;
  if (j !== null && items[j]) {
    e.preventDefault();
    items[j].focus();
  }
}

// ---------------------------------------------------------------- thread view

function threadView(threadId) {
  const params = new URLSearchParams(location.search);
  const st = {
    threadId,
    thread: null,
    runs: [],
    selected: params.get("run"),
    position: null, // index in the branch, null = end
    wantEvent: params.has("event") ? Number(params.get("event")) : null,
    branch: [], // runs of the selected branch, root first, with offsets
    total: 0,
    conv: null,
    live: null, // {runId, seq} while a run streams in
    logType: "",
    logOffset: null,
    tab: "state",
    compareWith: "",
    fetchToken: 0,
  };
  document.title = `${threadId} · agui console`;

  const back = h("a", { href: "/ui/", text: "← Threads", onclick: (e) => { e.preventDefault(); navigate("/ui/"); } });
  const title = h("h1", { className: "thread-title" }, h("span", { className: "muted", text: "Thread " }), h("span", { text: threadId }));
  const liveBadge = h("span", { className: "badge st-running", id: "live", hidden: true, text: "live" });
  const treeBox = h("div", { className: "tree", id: "tree", attrs: { role: "tree", "aria-label": "Run tree" }, dataset: { agui: "tree" } });
  const scrub = h("input", { type: "range", id: "scrubber", min: "0", max: "0", value: "0", step: "1",
    attrs: { "aria-label": "Position in the branch" }, dataset: { agui: "scrubber" } });
  const prev = h("button", { type: "button", text: "◀", title: "Previous event", attrs: { "aria-label": "Previous event" } });
  const next = h("button", { type: "button", text: "▶", title: "Next event", attrs: { "aria-label": "Next event" } });
  const toEnd = h("button", { type: "button", text: "End", title: "End of the run" });
  const posLabel = h("span", { className: "pos", id: "position", dataset: { agui: "position" } });
  const conv = h("div", { className: "conversation", id: "conversation", dataset: { agui: "conversation" }, attrs: { "aria-live": "polite" } });
  const side = h("div", { className: "side" });
  const tabs = {};
  const tabBar = h("div", { className: "tabs", attrs: { role: "tablist" } });
  for (const [id, label] of [["state", "State"], ["log", "Events"], ["compare", "Compare"], ["downloads", "Downloads"]]) {
    tabs[id] = h("button", { type: "button", id: `tab-${id}`, text: label, attrs: { role: "tab" },
      onclick: () => { st.tab = id; renderSide(); } });
    tabBar.append(tabs[id]);
  }
  const sideBody = h("div", { className: "side-body" });
  side.append(tabBar, sideBody);

  const input = h("textarea", { id: "branch-text", rows: 2, placeholder: "A new user message from this point…",
    attrs: { "aria-label": "New user message" } });
  const agentSel = h("select", { id: "branch-agent", attrs: { "aria-label": "Agent" } });
  const sendBtn = h("button", { type: "submit", id: "branch-send", text: "Branch from here" });
  const branchNote = h("p", { className: "muted", id: "branch-note" });
  const branchHint = h("p", { className: "muted", id: "branch-hint" });
  const branchForm = h("form", { className: "branch", onsubmit: (e) => { e.preventDefault(); branchFromHere(); } },
    input, h("div", { className: "branch-actions" }, agentSel, sendBtn), branchHint, branchNote);

  const layout = h("div", { className: "thread-view" },
    h("section", { className: "pane tree-pane" }, h("h2", { text: "Runs" }), treeBox),
    h("section", { className: "pane conv-pane" },
      h("div", { className: "scrub" }, prev, scrub, next, toEnd),
      posLabel, conv, branchForm),
    h("section", { className: "pane side-pane" }, side));
  clear(main()).append(h("div", { className: "thread-head" }, back, title, liveBadge), layout);

  // ------------------------------------------------------------ data

  async function loadThread() {
    const t = await json(`/threads/${enc(threadId)}`);
    st.thread = t;
    st.runs = t.runs;
    return t;
  }

  function runById(id) {
    return st.runs.find((r) => r.runId === id);
  }

  function pathTo(id) {
    const out = [];
    let cur = runById(id);
    while (cur) {
      out.push(cur);
      const p = cur.parentRunId ? runById(cur.parentRunId) : null;
      if (!p || p.firstSeq >= cur.firstSeq) break;
      cur = p;
    }
    out.reverse();
    let off = 0;
    return out.map((r) => {
      const e = { ...r, offset: off };
      off += r.eventCount;
      return e;
    });
  }

  function setBranch() {
    st.branch = pathTo(st.selected);
    st.total = st.branch.reduce((a, r) => a + r.eventCount, 0);
    scrub.max = String(Math.max(0, st.total - 1));
  }

  /** Branch position → {run, event}. */
  function at(p) {
    for (const r of st.branch) {
      if (p < r.offset + r.eventCount) return { run: r, event: p - r.offset };
    }
    const r = st.branch[st.branch.length - 1];
    return { run: r, event: r ? r.eventCount - 1 : 0 };
  }

  function setUrl() {
    const q = new URLSearchParams();
    if (st.position !== null) {
      const { run, event } = at(st.position);
      q.set("run", run.runId);
      q.set("event", String(event));
    } else if (st.selected) {
      q.set("run", st.selected);
    }
    history.replaceState(null, "", `/ui/threads/${enc(threadId)}${q.size ? `?${q}` : ""}`);
  }

  async function showPosition() {
    const token = ++st.fetchToken;
    const p = st.position ?? st.total - 1;
    scrub.value = String(Math.max(0, p));
    const { run, event } = at(p);
    if (!run) {
      posLabel.textContent = "No runs yet.";
      renderConversation({ messages: [], state: null });
      return;
    }
    const atEnd = st.position === null;
    const url = atEnd && run.status !== "running"
      ? `/threads/${enc(threadId)}/messages?run=${enc(run.runId)}`
      : `/threads/${enc(threadId)}/messages?run=${enc(run.runId)}&event=${event}`;
    try {
      const c = await json(url);
      if (token !== st.fetchToken) return; // a newer position was asked for
      st.conv = c;
      posLabel.textContent = `event ${event} of run ${run.runId} (${event + 1}/${run.eventCount}) · branch position ${p + 1} of ${st.total}`;
      posLabel.dataset.run = run.runId;
      posLabel.dataset.event = String(event);
      // AG-UI lineage (parentRunId) branches from the end of a run, never
      // from inside one: say so where a branch would start.
      const midRun = event < run.eventCount - 1;
      sendBtn.textContent = midRun ? "Branch after this run" : "Branch from here";
      branchHint.textContent = midRun
        ? `A new run continues from the end of run ${run.runId} (runs branch from a run's end).`
        : "";
      renderConversation(c);
      renderSide();
    } catch (e) {
      if (token === st.fetchToken) showError(conv, e);
    }
  }

  // ------------------------------------------------------------ 2. tree

  function renderTree() {
    const runs = st.runs;
    const rowH = 46;
    const laneW = 18;
    const lane = new Map();
    const kids = new Map();
    for (const r of runs) {
      const p = r.parentRunId && runById(r.parentRunId);
      if (p) {
        if (!kids.has(p.runId)) kids.set(p.runId, []);
        kids.get(p.runId).push(r);
      }
    }
    let lanes = 0;
    for (const r of runs) {
      const p = r.parentRunId && runById(r.parentRunId);
      const siblings = p ? kids.get(p.runId) : null;
      if (p && siblings[0] === r && lane.has(p.runId)) lane.set(r.runId, lane.get(p.runId));
      else lane.set(r.runId, lanes++);
    }
    const width = Math.max(1, lanes) * laneW + 8;
    const svg = s("svg", { class: "edges", width, height: runs.length * rowH, "aria-hidden": "true" });
    const row = new Map(runs.map((r, i) => [r.runId, i]));
    const cx = (id) => 4 + lane.get(id) * laneW + laneW / 2;
    const cy = (id) => row.get(id) * rowH + rowH / 2;
    const onPath = new Set(pathTo(st.selected).map((r) => r.runId));
    for (const r of runs) {
      const p = r.parentRunId && runById(r.parentRunId);
      if (!p) continue;
      const x1 = cx(p.runId); const y1 = cy(p.runId); const x2 = cx(r.runId); const y2 = cy(r.runId);
      const d = x1 === x2 ? `M${x1} ${y1}V${y2}` : `M${x1} ${y1}C${x1} ${y1 + rowH * 0.8} ${x2} ${y1} ${x2} ${Math.min(y2, y1 + rowH)}V${y2}`;
      svg.append(s("path", { d, class: `edge${onPath.has(r.runId) ? " on" : ""}` }));
    }
    for (const r of runs) {
      const fork = (kids.get(r.runId)?.length ?? 0) > 1;
      svg.append(s("circle", { cx: cx(r.runId), cy: cy(r.runId), r: fork ? 7 : 5, class: `node st-${r.status}${fork ? " fork" : ""}` }));
    }
    const list = h("div", { className: "runs" });
    list.style.paddingLeft = `${width + 4}px`;
    for (const r of runs) {
      const n = kids.get(r.runId)?.length ?? 0;
      const item = h("div", {
        className: `run${r.runId === st.selected ? " selected" : ""}${onPath.has(r.runId) ? " on-path" : ""}`,
        tabIndex: r.runId === st.selected ? 0 : -1,
        attrs: { role: "treeitem", "aria-selected": r.runId === st.selected ? "true" : "false" },
        dataset: { runId: r.runId, status: r.status },
        onclick: () => select(r.runId),
      },
        h("div", { className: "run-line" },
          h("span", { className: "run-id", text: short(r.runId, 22), title: r.runId }),
          h("span", { className: `badge st-${r.status}`, text: r.status }),
          n > 1 ? h("span", { className: "badge fork", text: `fork: ${n} branches` }) : null),
        h("div", { className: "run-meta muted" },
          `${r.agent ?? "—"} · ${r.eventCount} events · ${time(r.startedAt)}${r.finishedAt ? ` · ${duration(r.startedAt, r.finishedAt)}` : ""}`));
      item.style.height = `${rowH}px`;
      list.append(item);
    }
    const box = h("div", { className: "graph" }, svg, list);
    clear(treeBox).append(box);
    // Branches running beside another branch's run: they join the log
    // (and this tree) once the thread is free.
    const aside = st.thread?.runsAside ?? [];
    if (aside.length) {
      treeBox.append(h("div", { className: "aside muted" },
        h("div", { text: "Set aside (joins the thread when its run in flight ends):" }),
        ...aside.map((r) => h("div", { className: "run-line", dataset: { runId: r.runId, status: r.status } },
          h("span", { className: "run-id", text: short(r.runId, 22), title: r.runId }),
          h("span", { className: `badge st-${r.status}`, text: r.status }),
          h("span", { text: ` from ${short(r.parentRunId ?? "—", 22)} · ${r.eventCount} events` })))));
    }
  }

  treeBox.addEventListener("keydown", (e) => {
    const items = [...treeBox.querySelectorAll(".run")];
    const i = items.findIndex((x) => x.dataset.runId === document.activeElement?.dataset?.runId);
    const cur = items[i];
    let target = null;
    if (e.key === "ArrowDown") target = items[Math.min(items.length - 1, i + 1)];
    else if (e.key === "ArrowUp") target = items[Math.max(0, i - 1)];
    else if (e.key === "Home") target = items[0];
    else if (e.key === "End") target = items[items.length - 1];
    else if (e.key === "ArrowLeft" && cur) {
      const p = runById(cur.dataset.runId)?.parentRunId;
      target = items.find((x) => x.dataset.runId === p);
    } else if (e.key === "ArrowRight" && cur) {
      target = items.find((x) => runById(x.dataset.runId)?.parentRunId === cur.dataset.runId);
    } else if ((e.key === "Enter" || e.key === " ") && cur) {
      e.preventDefault();
      select(cur.dataset.runId);
      return;
    }
    if (target) {
      e.preventDefault();
      select(target.dataset.runId, true);
    }
  });

  function select(runId, keepFocus = false) {
    st.selected = runId;
    st.position = null;
    st.logOffset = null;
    setBranch();
    renderTree();
    setUrl();
    showPosition();
    fillAgents();
    const el = treeBox.querySelector(`.run[data-run-id="${CSS.escape(runId)}"]`);
    if (el && (keepFocus || document.activeElement === document.body)) el.focus();
    else if (el) el.focus({ preventScroll: false });
  }

  // ------------------------------------------------------------ 3. conversation

  const msgCache = new Map(); // key (id + JSON) → element, reused across positions

  function renderConversation(c) {
    const messages = c.messages ?? [];
    const keep = new Map();
    const els = messages.map((m, i) => {
      const key = `${i}\u0000${JSON.stringify(m)}`;
      const el = msgCache.get(key) ?? renderMessage(m);
      keep.set(key, el);
      return el;
    });
    msgCache.clear();
    for (const [k, v] of keep) msgCache.set(k, v);
    // Reuse the elements already in place; replace only what changed.
    const current = [...conv.children];
    let same = 0;
    while (same < els.length && same < current.length && current[same] === els[same]) same++;
    for (let i = current.length - 1; i >= same; i--) current[i].remove();
    if (els.length > same) conv.append(...els.slice(same));
    if (!messages.length) conv.append(h("p", { className: "muted empty", text: "No messages at this point." }));
    conv.dataset.count = String(messages.length);
  }

  function text(content) {
    if (content === undefined || content === null) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content.map((p) => (p && typeof p === "object" && typeof p.text === "string" ? p.text : JSON.stringify(p))).join("");
    }
    return JSON.stringify(content);
  }

  function pretty(v) {
    if (typeof v === "string") {
      try { return JSON.stringify(JSON.parse(v), null, 2); } catch { return v; }
    }
    return JSON.stringify(v, null, 2);
  }

  function renderMessage(m) {
    const role = String(m.role ?? "unknown");
    const el = h("article", { className: `msg role-${role.replace(/[^a-z]/g, "")}`, dataset: { messageId: String(m.id ?? ""), role } });
    el.append(h("header", {}, h("span", { className: "role", text: role }), h("span", { className: "muted mid", text: short(m.id, 28), title: String(m.id ?? "") })));
    if (role === "reasoning") {
      el.append(h("details", {}, h("summary", { text: "Reasoning" }), h("div", { className: "text", text: text(m.content) })));
      return el;
    }
    if (role === "activity") {
      el.append(h("div", { className: "muted", text: `activity: ${m.activityType ?? ""}` }), h("pre", { className: "json", text: pretty(m.content) }));
      return el;
    }
    if (role === "tool") {
      el.append(h("div", { className: "muted", text: `result of tool call ${m.toolCallId ?? ""}` }));
      if (m.error) el.append(h("div", { className: "error", text: String(m.error) }));
    }
    const t = text(m.content);
    if (t) el.append(h("div", { className: "text", text: t }));
    for (const tc of m.toolCalls ?? []) {
      el.append(h("div", { className: "tool-call", dataset: { toolCallId: String(tc.id ?? "") } },
        h("div", {}, h("span", { className: "muted", text: "tool call " }), h("strong", { text: tc.function?.name ?? "" }), h("span", { className: "muted", text: ` ${tc.id ?? ""}` })),
        h("pre", { className: "json args", text: pretty(tc.function?.arguments ?? "") })));
    }
    return el;
  }

  // ------------------------------------------------------------ state tree

  function jsonTree(v, depth = 0, key = null) {
    const label = key === null ? null : h("span", { className: "key", text: `${key}: ` });
    if (v !== null && typeof v === "object") {
      const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x]) : Object.entries(v);
      const d = h("details", { open: depth < 2 },
        h("summary", {}, label, h("span", { className: "muted", text: Array.isArray(v) ? `[${entries.length}]` : `{${entries.length}}` })));
      // Big values unfold a slice at a time.
      const shown = Math.min(entries.length, 200);
      const ul = h("div", { className: "jt" });
      for (const [k, x] of entries.slice(0, shown)) ul.append(jsonTree(x, depth + 1, k));
      if (entries.length > shown) ul.append(h("div", { className: "muted", text: `… ${entries.length - shown} more` }));
      d.append(ul);
      return d;
    }
    return h("div", { className: "leaf" }, label, h("span", { className: `v-${v === null ? "null" : typeof v}`, text: JSON.stringify(v) }));
  }

  // ------------------------------------------------------------ side panes

  function renderSide() {
    for (const [id, b] of Object.entries(tabs)) b.setAttribute("aria-selected", id === st.tab ? "true" : "false");
    if (st.tab === "state") {
      clear(sideBody).append(h("div", { className: "state", dataset: { agui: "state" } }, jsonTree(st.conv?.state ?? null)));
    } else if (st.tab === "log") renderLog();
    else if (st.tab === "compare") renderCompare();
    else renderDownloads();
  }

  // 5. event log
  const TYPES = ["RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "STEP_STARTED", "STEP_FINISHED", "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TEXT_MESSAGE_CHUNK", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
    "TOOL_CALL_CHUNK", "TOOL_CALL_RESULT", "STATE_SNAPSHOT", "STATE_DELTA", "MESSAGES_SNAPSHOT", "ACTIVITY_SNAPSHOT",
    "ACTIVITY_DELTA", "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END",
    "REASONING_END", "RAW", "CUSTOM"];

  function changed(e) {
    if (e.type === "STATE_DELTA") return `state ${(e.delta ?? []).map((op) => op?.path ?? "?").join(", ")}`;
    if (e.type === "STATE_SNAPSHOT") return "state /";
    if (e.type === "MESSAGES_SNAPSHOT") return `messages (${(e.messages ?? []).length})`;
    if (e.toolCallId) return `tool call ${e.toolCallId}`;
    if (e.messageId) return `message ${e.messageId}`;
    if (e.type?.startsWith("RUN_")) return `run ${e.runId ?? ""}`;
    return "";
  }

  let logSeq = 0;
  async function renderLog() {
    const mine = ++logSeq;
    const sel = h("select", { id: "log-type", attrs: { "aria-label": "Filter by type" },
      onchange: () => { st.logType = sel.value; st.logOffset = 0; renderLog(); } },
    h("option", { value: "", text: "all types" }), ...TYPES.map((t) => h("option", { value: t, text: t })));
    sel.value = st.logType;
    const p = st.position ?? st.total - 1;
    const offset = st.logOffset ?? (st.logType ? 0 : Math.floor(Math.max(0, p) / LOG_PAGE) * LOG_PAGE);
    const raw = h("pre", { className: "json raw", id: "raw-event", text: "Select an event to see its JSON." });
    const table = h("div", { className: "log", id: "log", attrs: { role: "list" } });
    const nav = h("div", { className: "log-nav" });
    clear(sideBody).append(h("div", { className: "log-tools" }, sel, nav), table, raw);
    if (!st.selected) return;
    try {
      const q = new URLSearchParams({ run: st.selected, offset: String(offset), limit: String(LOG_PAGE) });
      if (st.logType) q.set("type", st.logType);
      const page = await json(`/threads/${enc(threadId)}/branch?${q}`);
      if (mine !== logSeq) return;
      for (const ev of page.events) {
        const off = st.branch.find((r) => r.runId === ev.runId)?.offset ?? 0;
        const bp = off + ev.index;
        const item = h("button", { type: "button", className: `ev${bp === p ? " current" : ""}`, dataset: { seq: String(ev.seq) },
          onclick: () => {
            raw.textContent = JSON.stringify(ev.event, null, 2);
            st.logOffset = offset;
            move(bp);
          } },
        h("span", { className: "seq", text: `#${ev.seq}` }),
        h("span", { className: "etype", text: ev.type }),
        h("span", { className: "muted", text: `${new Date(ev.receivedAt).toLocaleTimeString()} · ${bytes(ev.bytes)}`, title: ev.receivedAt }),
        h("span", { className: "chg", text: changed(ev.event) }));
        table.append(item);
        if (bp === p && !st.logType) raw.textContent = JSON.stringify(ev.event, null, 2);
      }
      const last = Math.min(page.total, offset + page.events.length);
      nav.append(
        h("button", { type: "button", text: "‹", disabled: offset === 0, attrs: { "aria-label": "Earlier events" },
          onclick: () => { st.logOffset = Math.max(0, offset - LOG_PAGE); renderLog(); } }),
        h("span", { className: "muted", text: `${page.total ? offset + 1 : 0}–${last} of ${page.total}` }),
        h("button", { type: "button", text: "›", disabled: last >= page.total, attrs: { "aria-label": "Later events" },
          onclick: () => { st.logOffset = offset + LOG_PAGE; renderLog(); } }));
      table.querySelector(".current")?.scrollIntoView({ block: "nearest" });
      table.addEventListener("keydown", (e) => listKeys(e, table, "button.ev"));
    } catch (e) { showError(table, e); }
  }

  // 6. compare
  async function renderCompare() {
    const sel = h("select", { id: "compare-with", attrs: { "aria-label": "Compare with run" },
      onchange: () => { st.compareWith = sel.value; renderCompare(); } },
    h("option", { value: "", text: "compare with…" }),
    ...st.runs.filter((r) => r.runId !== st.selected).map((r) => h("option", { value: r.runId, text: r.runId })));
    sel.value = st.compareWith;
    const out = h("div", { className: "compare", id: "compare", dataset: { agui: "compare" } });
    clear(sideBody).append(h("p", {}, "Run ", h("strong", { text: st.selected ?? "" }), " against ", sel), out);
    if (!st.compareWith || !st.selected) return;
    try {
      const c = await json(`/threads/${enc(threadId)}/compare?a=${enc(st.selected)}&b=${enc(st.compareWith)}`);
      const list = (msgs) => msgs.length ? msgs.map(renderMessage) : [h("p", { className: "muted", text: "none" })];
      out.append(
        h("dl", {},
          h("dt", { text: "First common ancestor" }),
          h("dd", { dataset: { agui: "compare-ancestor" }, text: c.commonAncestor ?? "none (no shared run)" }),
          h("dt", { text: "First divergence" }),
          h("dd", { dataset: { agui: "compare-divergence" }, text: `${c.firstDivergence.a ?? "(ends at the ancestor)"} vs ${c.firstDivergence.b ?? "(ends at the ancestor)"}` }),
          h("dt", { text: "Messages in common (from the start)" }),
          h("dd", { text: String(c.commonMessages) })),
        h("h3", { text: `Only in ${c.a}` }), h("div", { className: "only-a" }, list(c.onlyA)),
        h("h3", { text: `Only in ${c.b}` }), h("div", { className: "only-b" }, list(c.onlyB)),
        h("h3", { text: "State difference (JSON Patch, a → b)" }),
        h("pre", { className: "json", dataset: { agui: "state-patch" }, text: JSON.stringify(c.statePatch, null, 2) }));
    } catch (e) { showError(out, e); }
  }

  // 9. downloads
  function renderDownloads() {
    const run = st.selected;
    const base = `/threads/${enc(threadId)}`;
    const item = (label, path, name, kind) => h("li", {}, h("button", { type: "button", text: label,
      onclick: async (e) => {
        const b = e.currentTarget;
        b.disabled = true;
        try { await download(path, name, kind); } catch (err) { if (!(err instanceof AuthNeeded)) alert(String(err.message ?? err)); }
        b.disabled = false;
      } }));
    const safe = (x) => String(x).replace(/[^A-Za-z0-9._-]/g, "_");
    clear(sideBody).append(h("p", { text: `Branch ending at run ${run ?? ""}` }), h("ul", { className: "downloads" },
      item("Events (NDJSON)", `${base}/events?branch=${enc(run)}`, `${safe(threadId)}-${safe(run)}.ndjson`, "sse"),
      item("Compacted: deltas", `${base}/events?branch=${enc(run)}&compact=deltas`, `${safe(run)}-deltas.ndjson`, "sse"),
      item("Compacted: snapshot", `${base}/events?branch=${enc(run)}&compact=snapshot`, `${safe(run)}-snapshot.ndjson`, "sse"),
      item("Compacted: latest", `${base}/events?branch=${enc(run)}&compact=latest`, `${safe(run)}-latest.ndjson`, "sse"),
      item("Run artifact (JSON)", `${base}/runs/${enc(run)}/artifact`, `${safe(run)}-artifact.json`, "json")));
  }

  async function download(path, name, kind) {
    const res = await api(path, { headers: { Accept: kind === "sse" ? "text/event-stream" : "application/json" } });
    if (!res.ok) {
      const b = await res.json().catch(() => null);
      throw new Error(b?.error?.message ?? `HTTP ${res.status}`);
    }
    let blob;
    if (kind === "sse") {
      const lines = [];
      await readSse(res, (f) => lines.push(f.data));
      blob = new Blob([lines.join("\n") + (lines.length ? "\n" : "")], { type: "application/x-ndjson" });
    } else {
      blob = new Blob([await res.text()], { type: "application/json" });
    }
    const url = URL.createObjectURL(blob);
    const a = h("a", { href: url, download: name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // ------------------------------------------------------------ 4. time travel

  function move(p) {
    const clamped = Math.max(0, Math.min(st.total - 1, p));
    st.position = clamped >= st.total - 1 && !st.live ? null : clamped;
    if (st.position !== null && clamped === st.total - 1 && at(clamped).run.status !== "running") st.position = null;
    setUrl();
    showPosition();
  }
  scrub.addEventListener("input", () => move(Number(scrub.value)));
  prev.addEventListener("click", () => move((st.position ?? st.total - 1) - 1));
  next.addEventListener("click", () => move((st.position ?? st.total - 1) + 1));
  toEnd.addEventListener("click", () => { st.position = null; setUrl(); showPosition(); });

  // ------------------------------------------------------------ 8. branch

  function fillAgents() {
    const names = new Set(st.runs.map((r) => r.agent).filter(Boolean));
    if (st.thread?.agent) names.add(st.thread.agent);
    const selRun = runById(st.selected);
    clear(agentSel).append(...[...names].map((n) => h("option", { value: n, text: n })));
    if (selRun?.agent) agentSel.value = selRun.agent;
    sendBtn.disabled = names.size === 0;
  }

  async function branchFromHere() {
    const msg = input.value.trim();
    if (!msg || !st.selected || !agentSel.value) return;
    const { run, event } = at(st.position ?? st.total - 1);
    const parent = st.position === null ? st.selected : run.runId;
    const runId = crypto.randomUUID();
    sendBtn.disabled = true;
    branchNote.textContent = `Sending run ${runId} from ${parent}…`;
    try {
      // The new run's parent is a whole run: it starts from that run's end
      // even when the scrubber stands inside it.
      const base = st.position !== null && event < run.eventCount - 1
        ? await json(`/threads/${enc(threadId)}/messages?run=${enc(parent)}`)
        : st.conv;
      const messages = [...(base?.messages ?? []), { id: crypto.randomUUID(), role: "user", content: msg }];
      const body = {
        threadId, runId, parentRunId: parent, messages,
        state: base?.state ?? {}, tools: [], context: [], forwardedProps: {},
      };
      const res = await api(`/agents/${enc(agentSel.value)}/run`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify(body),
      });
      if (!res.ok) {
        const b = await res.json().catch(() => null);
        throw new Error(b?.error?.message ?? `HTTP ${res.status}`);
      }
      input.value = "";
      let first = true;
      await readSse(res, async () => {
        if (first) {
          first = false;
          await loadThread();
          if (runById(runId)) select(runId);
        }
        scheduleLive();
      });
      branchNote.textContent = `Run ${runId} finished.`;
      await loadThread();
      select(runId);
    } catch (e) {
      if (!(e instanceof AuthNeeded)) branchNote.textContent = `Could not branch: ${e.message ?? e}`;
    } finally {
      sendBtn.disabled = false;
    }
  }

  // ------------------------------------------------------------ 7. live

  let liveTimer = null;
  function scheduleLive() {
    if (liveTimer) return;
    liveTimer = setTimeout(async () => {
      liveTimer = null;
      await refreshThread();
    }, 150);
  }

  let attached = null;
  async function attach(run) {
    if (attached === run.runId) return;
    attached = run.runId;
    const ctl = new AbortController();
    aborts.push(ctl);
    liveBadge.hidden = false;
    try {
      const res = await api(`/threads/${enc(threadId)}/events`, {
        headers: { Accept: "text/event-stream", "Last-Event-ID": String(Math.max(0, run.firstSeq - 1)) },
        signal: ctl.signal,
      });
      await readSse(res, () => scheduleLive(), ctl.signal);
    } catch { /* closed or aborted */ }
    attached = null;
    liveBadge.hidden = true;
    if (!ctl.signal.aborted) await refreshThread();
  }

  let refreshing = false;
  let asideTimer = null;
  aborts.push({ abort: () => clearTimeout(asideTimer) });
  async function refreshThread() {
    if (refreshing) { scheduleLive(); return; }
    refreshing = true;
    try {
      const shape = () => JSON.stringify([st.runs, st.thread?.runsAside ?? []].map((runs) => runs.map((r) => [r.runId, r.status, r.eventCount])));
      const before = shape();
      const wasLatest = st.selected === st.runs[st.runs.length - 1]?.runId;
      await loadThread();
      const after = shape();
      const latest = st.runs[st.runs.length - 1];
      if (before !== after) {
        // Follow the newest run when the latest was selected at its end.
        if (wasLatest && st.position === null && latest) st.selected = latest.runId;
        setBranch();
        renderTree();
        if (st.position === null) await showPosition();
        fillAgents();
      }
      const running = st.runs.find((r) => r.status === "running");
      if (running) attach(running);
      // A run set aside shows in the tree once it joined: look again.
      else if ((st.thread?.runsAside ?? []).length && !asideTimer) {
        asideTimer = setTimeout(() => { asideTimer = null; refreshThread(); }, 1000);
      }
    } catch (e) {
      if (!(e instanceof AuthNeeded)) posLabel.textContent = String(e.message ?? e);
    } finally {
      refreshing = false;
    }
  }

  // ------------------------------------------------------------ start

  (async () => {
    try {
      await loadThread();
    } catch (e) {
      showError(main(), e);
      return;
    }
    if (!st.selected || !runById(st.selected)) st.selected = st.runs[st.runs.length - 1]?.runId ?? null;
    setBranch();
    if (st.wantEvent !== null && st.selected) {
      const r = st.branch[st.branch.length - 1];
      const n = Math.max(0, Math.min(r.eventCount - 1, st.wantEvent));
      st.position = r.offset + n;
    }
    renderTree();
    fillAgents();
    renderSide();
    await showPosition();
    const running = st.runs.find((r) => r.status === "running");
    if (running) attach(running);
    every(2000, refreshThread);
  })();
}

// ---------------------------------------------------------------- boot

applyTheme();
document.getElementById("theme").addEventListener("click", () => {
  const dark = matchMedia("(prefers-color-scheme: dark)").matches;
  const cur = document.documentElement.dataset.theme ?? (dark ? "dark" : "light");
  localStorage.setItem(THEME_KEY, cur === "dark" ? "light" : "dark");
  applyTheme();
});
document.getElementById("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  route();
});
document.getElementById("home").addEventListener("click", (e) => {
  e.preventDefault();
  navigate("/ui/");
});
window.addEventListener("popstate", route);
route();
