// Drives the agui console (/ui/) in the system's headless Chromium through
// puppeteer-core (no browser download: the executable comes from the plan).
// One browser session runs every scenario; the report goes to stdout as JSON
// and the Rust test (crates/agui-cli/tests/console.rs) checks it against the
// HTTP API and `agui history`.
//
// Plan: {chromium, base, authBase, tokens: {a, b}, thread, runs: [r1, r2, r3],
//        event, xssThread, tenantThread, downloads: dir, shots?: dir}
import puppeteer from "puppeteer-core";
import { join } from "node:path";

const plan = JSON.parse(process.argv[2]);
const report = { pageErrors: [], cspViolations: [], steps: [] };
const T = 20000;

const browser = await puppeteer.launch({
  executablePath: plan.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});

async function newPage(width = 1440, height = 900) {
  const page = await browser.newPage();
  await page.setViewport({ width, height });
  page.on("pageerror", (e) => report.pageErrors.push(String(e?.message ?? e)));
  await page.evaluateOnNewDocument(() => {
    document.addEventListener("securitypolicyviolation", (e) => {
      (window.__csp ??= []).push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  return page;
}

const shot = async (page, name) => {
  if (plan.shots) await page.screenshot({ path: join(plan.shots, `${name}.png`) });
};

function conversation(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll('[data-agui="conversation"] .msg')].map((m) => ({
      id: m.dataset.messageId,
      role: m.dataset.role,
      text: m.querySelector(".text")?.textContent ?? "",
      toolCalls: [...m.querySelectorAll(".tool-call")].map((t) => t.dataset.toolCallId),
    })));
}

async function waitPosition(page, run, event) {
  await page.waitForFunction(
    (run, event) => {
      const p = document.querySelector('[data-agui="position"]');
      return p && p.dataset.run === run && (event === null || p.dataset.event === String(event));
    },
    { timeout: T },
    run,
    event,
  );
}

const step = (name) => report.steps.push(name);

try {
  const page = await newPage();
  const [r1, r2, r3] = plan.runs;

  // 1. The thread appears in the list.
  step("list");
  await page.goto(`${plan.base}/ui/`);
  await page.waitForSelector(`[data-thread-id="${plan.thread}"]`, { timeout: T });
  report.listed = await page.$$eval("[data-thread-id]", (els) => els.map((e) => e.dataset.threadId));
  await shot(page, "list");

  // 2. Its tree has three runs; clicking run 2 shows its conversation.
  step("tree");
  await page.click(`[data-thread-id="${plan.thread}"] a`);
  await page.waitForFunction(() => document.querySelectorAll("[data-run-id]").length >= 3, { timeout: T });
  report.treeRuns = await page.$$eval(".run[data-run-id]", (els) => els.map((e) => e.dataset.runId));
  await page.click(`.run[data-run-id="${r2}"]`);
  await waitPosition(page, r2, null);
  report.run2 = await conversation(page);
  report.run2Url = page.url();

  // 4. Time travel: a shared link, then the scrubber with the keyboard.
  step("time travel link");
  await page.goto(`${plan.base}/ui/threads/${encodeURIComponent(plan.thread)}?run=${r3}&event=${plan.event}`);
  await waitPosition(page, r3, plan.event);
  report.atLink = await conversation(page);
  step("time travel keys");
  await page.click(`.run[data-run-id="${r3}"]`);
  await waitPosition(page, r3, plan.r3Events - 1);
  await page.focus("#scrubber");
  for (let i = plan.r3Events - 1; i > plan.event; i--) await page.keyboard.press("ArrowLeft");
  await waitPosition(page, r3, plan.event);
  report.atKeys = await conversation(page);
  report.midRunBranch = await page.$eval("#branch-send", (b) => b.textContent);
  report.midRunHint = await page.$eval("#branch-hint", (p) => p.textContent);
  report.atKeysUrl = page.url();
  await page.click("#tab-log");
  await page.waitForSelector("#log .ev.current", { timeout: T });
  report.logCurrent = await page.$eval("#log .ev.current", (e) => e.dataset.seq);
  await shot(page, "time-travel");

  // 8. Branch from run 1.
  step("branch");
  await page.click(`.run[data-run-id="${r1}"]`);
  await waitPosition(page, r1, null);
  await page.type("#branch-text", "a branch from run one");
  await page.click("#branch-send");
  await page.waitForFunction(() => document.querySelectorAll(".run[data-run-id]").length >= 4, { timeout: T });
  await page.waitForFunction(() => /finished\.$/.test(document.querySelector("#branch-note")?.textContent ?? ""), { timeout: T });
  report.afterBranchRuns = await page.$$eval(".run[data-run-id]", (els) => els.map((e) => e.dataset.runId));
  report.forkShown = await page.$eval(`.run[data-run-id="${r1}"]`, (e) => e.querySelector(".badge.fork")?.textContent ?? null);
  report.branchConversation = await conversation(page);
  await shot(page, "tree");

  // 6. Compare run 2 with the new run.
  step("compare");
  const r4 = report.afterBranchRuns.find((r) => ![r1, r2, r3].includes(r));
  report.r4 = r4;
  await page.click(`.run[data-run-id="${r2}"]`);
  await waitPosition(page, r2, null);
  await page.click("#tab-compare");
  await page.waitForSelector("#compare-with", { timeout: T });
  await page.select("#compare-with", r4);
  await page.waitForSelector('[data-agui="compare-ancestor"]', { timeout: T });
  report.compareAncestor = await page.$eval('[data-agui="compare-ancestor"]', (e) => e.textContent);
  report.compareDivergence = await page.$eval('[data-agui="compare-divergence"]', (e) => e.textContent);
  await shot(page, "compare");

  // 9. Downloads of run 2's branch, saved by the browser into plan.downloads.
  step("downloads");
  const cdp = await page.createCDPSession();
  await cdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: plan.downloads });
  await page.click("#tab-downloads");
  await page.waitForSelector(".downloads button", { timeout: T });
  report.downloads = [];
  for (const label of ["Events (NDJSON)", "Compacted: latest", "Run artifact (JSON)"]) {
    await page.evaluate((label) => {
      [...document.querySelectorAll(".downloads button")].find((b) => b.textContent === label).click();
    }, label);
    await page.waitForFunction(
      (label) => !([...document.querySelectorAll(".downloads button")].find((b) => b.textContent === label)?.disabled),
      { timeout: T },
      label,
    );
    report.downloads.push(label);
  }

  // 7. A slow run appears live and its text grows while it streams.
  step("live");
  await page.goto(`${plan.base}/ui/`);
  await page.waitForSelector(`[data-thread-id="${plan.thread}"]`, { timeout: T });
  const slow = fetch(`${plan.base}/agents/demo/run`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({
      threadId: plan.slowThread, runId: "slow-1", state: {}, tools: [], context: [],
      messages: [{ id: "slow-u1", role: "user", content: "tell me a slow story" }],
      forwardedProps: { demo: { delayMs: 150, extraDeltas: 30 } },
    }),
  }).then((r) => r.text());
  await page.waitForSelector(`[data-thread-id="${plan.slowThread}"]`, { timeout: T });
  report.liveListed = true;
  await page.click(`[data-thread-id="${plan.slowThread}"] a`);
  const lengths = [];
  const started = Date.now();
  for (;;) {
    const s = await page.evaluate(() => {
      const msgs = [...document.querySelectorAll('[data-agui="conversation"] .msg[data-role="assistant"] .text')];
      const run = document.querySelector('.run[data-run-id="slow-1"]');
      return { len: msgs.map((m) => m.textContent.length).reduce((a, b) => a + b, 0), status: run?.dataset.status ?? null,
        live: !document.querySelector("#live")?.hidden };
    });
    lengths.push(s);
    if (s.status === "finished" || Date.now() - started > T) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  await slow;
  report.live = lengths;

  // Security: payloads render as text, no script runs.
  step("xss");
  await page.goto(`${plan.base}/ui/threads/${encodeURIComponent(plan.xssThread)}`);
  await page.waitForSelector('[data-agui="conversation"] .msg', { timeout: T });
  await page.click("#tab-state");
  await new Promise((r) => setTimeout(r, 300));
  report.xss = await page.evaluate(() => ({
    flag: window.__xss ?? null,
    texts: [...document.querySelectorAll('[data-agui="conversation"] .msg .text')].map((e) => e.textContent),
    imgs: document.querySelectorAll('[data-agui="conversation"] img, .state img').length,
    links: document.querySelectorAll('[data-agui="conversation"] a').length,
    scripts: document.querySelectorAll("main script").length,
    state: document.querySelector('[data-agui="state"]')?.textContent ?? "",
  }));
  report.csp = await page.evaluate(() => window.__csp ?? []);

  // Phone width.
  step("phone");
  const phone = await newPage(390, 844);
  await phone.goto(`${plan.base}/ui/threads/${encodeURIComponent(plan.thread)}`);
  await phone.waitForSelector('[data-agui="conversation"] .msg', { timeout: T });
  report.phoneOverflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await shot(phone, "phone");
  await phone.close();

  // 10. Tenants: B's token never lists A's thread.
  step("tenants");
  const auth = await newPage();
  await auth.goto(`${plan.authBase}/ui/`);
  await auth.waitForSelector("#token", { timeout: T });
  report.loginShown = true;
  await auth.type("#token", plan.tokens.b);
  await auth.click("#token-submit");
  await auth.waitForFunction(() => /shown|No threads/.test(document.querySelector("#threads-status")?.textContent ?? ""), { timeout: T });
  report.tenantB = await auth.$$eval("[data-thread-id]", (els) => els.map((e) => e.dataset.threadId));
  await auth.goto(`${plan.authBase}/ui/threads/${encodeURIComponent(plan.tenantThread)}`);
  await auth.waitForSelector(".error", { timeout: T });
  report.tenantBDirect = await auth.$eval(".error", (e) => e.textContent);
  await auth.click("#forget");
  await auth.goto(`${plan.authBase}/ui/`);
  await auth.waitForSelector("#token", { timeout: T });
  await auth.type("#token", plan.tokens.a);
  await auth.click("#token-submit");
  await auth.waitForSelector(`[data-thread-id="${plan.tenantThread}"]`, { timeout: T });
  report.tenantA = await auth.$$eval("[data-thread-id]", (els) => els.map((e) => e.dataset.threadId));
  report.csp = [...report.csp, ...(await auth.evaluate(() => window.__csp ?? []))];
  step("done");
} catch (e) {
  report.failure = String(e?.stack ?? e);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(report));
