// Big-thread timings of the console, in headless Chromium (opt-in; run by
// scripts/console-bench, which makes the data). Each figure is wall time
// from the action to the page showing its result, measured from Node
// (so it includes a few milliseconds of DevTools protocol round trips).
// Plan: {chromium, base}. Prints JSON.
import puppeteer from "puppeteer-core";

const plan = JSON.parse(process.argv[2]);
const T = 120000;
// Each figure is also printed to stderr as soon as it is measured, so a run
// cut short still tells what it saw.
const out = new Proxy({}, {
  set(o, k, v) {
    o[k] = v;
    process.stderr.write(`${String(k)}: ${JSON.stringify(v)}\n`);
    return true;
  },
});
const browser = await puppeteer.launch({
  executablePath: plan.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage();
await page.setViewport({ width: 1440, height: 900 });

const ms = async (f) => {
  const t = performance.now();
  await f();
  return Math.round(performance.now() - t);
};
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const label = () => page.$eval('[data-agui="position"]', (e) => e.textContent);
async function step(key) {
  const before = await label();
  return ms(async () => {
    await page.keyboard.press(key);
    await page.waitForFunction((b) => document.querySelector('[data-agui="position"]').textContent !== b
      && document.querySelector('[data-agui="position"]').dataset.event !== undefined, { timeout: T }, before);
    // The conversation of that position is in the DOM once the label moved;
    // wait one frame for layout.
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
  });
}
async function steps(key, n) {
  const xs = [];
  for (let i = 0; i < n; i++) xs.push(await step(key));
  return { median: median(xs), max: Math.max(...xs), n };
}

try {
  // 1. 10,000 threads.
  out.listFirstPage = await ms(async () => {
    await page.goto(`${plan.base}/ui/`);
    await page.waitForFunction(() => document.querySelectorAll("[data-thread-id]").length >= 100, { timeout: T });
  });
  const pages = [];
  // Load more, up to plan.listPages pages (default 10; the whole list of
  // 10,000 is 100 pages).
  out.listMorePages = await ms(async () => {
    for (let k = 0; k < (plan.listPages ?? 10); k++) {
      const n = await page.$$eval("[data-thread-id]", (e) => e.length);
      const more = await page.$("#more:not([hidden])");
      if (!more) break;
      pages.push(await ms(async () => {
        await more.click();
        await page.waitForFunction((n) => document.querySelectorAll("[data-thread-id]").length > n
          || document.querySelector("#more").hidden, { timeout: T }, n);
      }));
    }
  });
  out.listThreads = await page.$$eval("[data-thread-id]", (e) => e.length);
  out.listPageMedian = median(pages);
  out.listPageMax = Math.max(...pages);
  out.listPrefixSearch = await ms(async () => {
    await page.type("#prefix", "list-0999");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelectorAll("[data-thread-id]").length === 10
      && [...document.querySelectorAll("[data-thread-id]")].every((e) => e.dataset.threadId.startsWith("list-0999")), { timeout: T });
  });

  // 2. A 500-run tree.
  out.treeOpen = await ms(async () => {
    await page.goto(`${plan.base}/ui/threads/big-tree`);
    await page.waitForFunction(() => document.querySelectorAll(".run[data-run-id]").length === 500
      && document.querySelector('[data-agui="position"]')?.dataset.run, { timeout: T });
  });
  out.treeSelect = await ms(async () => {
    await page.click('.run[data-run-id="tree-r250"]');
    await page.waitForFunction(() => document.querySelector('[data-agui="position"]').dataset.run === "tree-r250", { timeout: T });
  });
  await page.focus('.run[data-run-id="tree-r250"]');
  out.treeKeyStep = await steps("ArrowDown", 5);

  // 3. A 5,000-message conversation.
  out.convOpen = await ms(async () => {
    await page.goto(`${plan.base}/ui/threads/big-conv`);
    await page.waitForFunction(() => document.querySelector('[data-agui="conversation"]')?.dataset.count === "5000", { timeout: T });
  });
  await page.focus("#scrubber");
  out.convStepBack = await steps("ArrowLeft", 5);
  out.convStepForward = await steps("ArrowRight", 5);

  // 4. A 100,000-event branch.
  out.branchOpen = await ms(async () => {
    await page.goto(`${plan.base}/ui/threads/big-branch`);
    await page.waitForFunction(() => document.querySelector('[data-agui="position"]')?.dataset.run === "branch-r9", { timeout: T });
  });
  out.branchEvents = await page.$eval("#scrubber", (e) => Number(e.max) + 1);
  await page.focus("#scrubber");
  out.branchStepBack = await steps("ArrowLeft", 5);
  out.branchStepForward = await steps("ArrowRight", 5);
  out.branchJumpHome = await step("Home");
  // A drag of the scrubber to the middle of a 10,000-event run.
  out.branchJumpMiddle = await ms(async () => {
    await page.$eval("#scrubber", (e) => { e.value = "55000"; e.dispatchEvent(new Event("input")); });
    await page.waitForFunction(() => document.querySelector('[data-agui="position"]').dataset.run === "branch-r5"
      && document.querySelector('[data-agui="position"]').dataset.event === "4995", { timeout: T });
  });
  await page.focus("#scrubber");
  out.branchStepBackMiddle = await steps("ArrowLeft", 5);
  out.branchJumpEnd = await step("End");
} catch (e) {
  out.failure = String(e?.stack ?? e);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out, null, 2) + "\n");
