// Screenshots of the Flink web UI while a Stoker job runs, by headless Chromium driven by
// playwright-core. Run through scripts/webui-screenshot.sh, which starts the cluster, the job and a
// simulated trainer.
//
//   node screenshot.mjs [--mode metrics] --rest http://127.0.0.1:8081 --job <job-id>
//        [--out docs/webui-metrics.png] [--chromium /usr/bin/chromium]
//   node screenshot.mjs --mode rescale --rest http://127.0.0.1:8081 --job <job-id>
//        [--out docs/webui-rescale.png] [--trainer-root /dev/shm/.../<job-name>]
//        [--parallelism N] [--timeout-s 240] [--chromium /usr/bin/chromium]
//
// metrics (the default): opens the job's graph, selects the sink operator, opens its Metrics tab
// and adds the sink's metrics of rank 0 (trainerWaitTimeRatio, batchesAhead, trainerConsumedStep)
// as full-width charts, then saves a PNG.
//
// rescale: the web UI's parallelism editor (FLINK-31471; a cluster with jobmanager.scheduler:
// adaptive and web.rescale.enable: true, which adds a Scale column of +/- buttons to the vertex
// table of the job's Overview tab). Clicks + on the vertex `Source: jsonl-source -> ...` (the CPU
// stages) until the table shows the new parallelism (default: the current one + 2), checks that
// the web UI sends PUT /jobs/<id>/resource-requirements with that upper bound, polls
// GET /jobs/<id> until the vertex runs that many subtasks and every vertex is RUNNING, waits until
// every rank of the trainer acknowledged 3 more steps (the ack.json files under --trainer-root),
// checks that the job had no failure (GET /jobs/<id>/exceptions empty, the job's numRestarts at
// most 1: the rescale's own restart; the job RUNNING) and, where the cluster keeps a rescale
// history (web.adaptive-scheduler.rescale-history.size), that it has one more completed rescale,
// then saves one PNG: the table with the requested parallelism and the web UI's confirmation,
// above the job's page after the rescale.
//
// Every mode exits non-zero with a message on a failed step or check and saves the page as
// <out>.failed.png.
import { chromium } from "playwright-core";
import { parseArgs } from "node:util";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

const { values: args } = parseArgs({
  options: {
    mode: { type: "string", default: "metrics" },
    rest: { type: "string", default: "http://127.0.0.1:8081" },
    job: { type: "string" },
    out: { type: "string" },
    chromium: { type: "string", default: process.env.CHROMIUM || "/usr/bin/chromium" },
    vertex: { type: "string" },
    metrics: {
      type: "string",
      default: "rank.0.trainerWaitTimeRatio,rank.0.batchesAhead,rank.0.trainerConsumedStep",
    },
    parallelism: { type: "string" },
    "timeout-s": { type: "string", default: "240" },
    "trainer-root": { type: "string" },
  },
});
if (!args.job) throw new Error("--job <job-id> is required");
if (!["metrics", "rescale"].includes(args.mode)) throw new Error(`--mode metrics|rescale, not ${args.mode}`);
args.out ??= args.mode === "rescale" ? "docs/webui-rescale.png" : "docs/webui-metrics.png";
args.vertex ??= args.mode === "rescale" ? "Source: jsonl-source" : "arrow-shm-sink";

const log = (msg) => console.log(`[screenshot] ${msg}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function rest(path, init) {
  const response = await fetch(`${args.rest}${path}`, init);
  if (!response.ok) throw new Error(`${init?.method ?? "GET"} ${path}: HTTP ${response.status}`);
  return response.json();
}

const job = await rest(`/jobs/${args.job}`);
const vertex = job.vertices.find((v) => v.name.includes(args.vertex));
if (!vertex) throw new Error(`no vertex named like ${args.vertex} in job ${args.job}`);

const browser = await chromium.launch({
  executablePath: args.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  if (args.mode === "metrics") await metricsShot();
  else await rescaleShot();
  console.log(`saved ${args.out}`);
} finally {
  await browser.close();
}

async function metricsShot() {
  const viewport = { width: 1600, height: 2000 };
  const page = await browser.newPage({ viewport });
  // The web UI routes: job overview with one vertex selected, its Metrics tab.
  await page.goto(`${args.rest}/#/job/running/${args.job}/overview/${vertex.id}/metrics`, {
    waitUntil: "networkidle",
  });
  // The Metrics tab shows "Add Metric:" and a searchable select (placeholder "Select Metric Name")
  // once the vertex has metrics; "No Available Metric" before.
  const select = page.locator(".metric-selector nz-select");
  try {
    await select.waitFor({ timeout: 120000 });
  } catch (e) {
    await page.screenshot({ path: `${args.out}.failed.png` });
    throw new Error(`the Metrics tab did not show (page saved as ${args.out}.failed.png): ${e}`);
  }
  for (const name of args.metrics.split(",")) {
    // open the select, type to filter, pick the first match (the subtask that serves the rank)
    await select.click();
    await page.keyboard.type(name);
    const option = page.locator("nz-option-item", { hasText: name }).first();
    try {
      await option.waitFor({ timeout: 15000 });
    } catch (e) {
      await page.screenshot({ path: `${args.out}.failed.png` });
      throw new Error(`no metric ${name} to add (page saved as ${args.out}.failed.png): ${e}`);
    }
    await option.click();
    await page.keyboard.press("Escape");
  }
  // drag the divider between the job graph (with the metrics drawer) and the vertex table down,
  // so that all charts fit without scrolling
  const divider = page.locator("flink-resize div.resize:not(.vertical)").first();
  const box = await divider.boundingBox();
  if (box) {
    const x = box.x + box.width / 2;
    await page.mouse.move(x, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(x, viewport.height - 60, { steps: 20 });
    await page.mouse.up();
  }
  // full-width charts, so that each chart's title (the metric's whole name) is readable
  const big = page.locator("flink-job-chart button", { hasText: "Big" });
  for (let i = 0; i < (await big.count()); i++) await big.nth(i).click();
  // back to the top of the drawer (adding charts scrolled it)
  await page.locator(".metric-selector").evaluate((el) => {
    for (let e = el.parentElement; e; e = e.parentElement) if (e.scrollTop > 0) e.scrollTop = 0;
  });
  // let the charts collect a few samples (the UI polls the REST API every few seconds)
  await page.waitForTimeout(12000);
  // down to the end of the vertex table below the graph (the rest of the page is empty)
  const table = await page.locator("nz-table").first().boundingBox();
  const height = table ? Math.min(viewport.height, Math.ceil(table.y + table.height + 16)) : viewport.height;
  await page.screenshot({ path: args.out, clip: { x: 0, y: 0, width: viewport.width, height } });
}

// The lowest consumed_step over the trainer's ranks (ack.json of each rank of the newest
// generation), or -1 before every rank acknowledged a step.
function trainerStep() {
  const root = args["trainer-root"];
  const gens = readdirSync(root).filter((d) => d.startsWith("gen-")).sort();
  if (gens.length === 0) return -1;
  const gen = join(root, gens[gens.length - 1]);
  const ranks = readdirSync(gen).filter((d) => d.startsWith("rank-"));
  let lowest = Infinity;
  for (const rank of ranks) {
    try {
      lowest = Math.min(lowest, JSON.parse(readFileSync(join(gen, rank, "ack.json"), "utf8")).consumed_step);
    } catch {
      return -1; // not acknowledged yet, or read while replaced
    }
  }
  return ranks.length ? lowest : -1;
}

async function rescaleShot() {
  const features = (await rest("/config")).features ?? {};
  if (!features["web-rescale"]) {
    throw new Error("the web UI has no rescale editor: start the cluster with web.rescale.enable: true and jobmanager.scheduler: adaptive");
  }
  const from = vertex.parallelism;
  const to = args.parallelism ? Number(args.parallelism) : from + 2;
  if (!(to > from)) throw new Error(`--parallelism ${to}: more than the vertex's ${from}`);
  const slots = (await rest("/overview"))["slots-total"];
  if (slots < to) throw new Error(`the cluster has ${slots} slots, fewer than parallelism ${to}`);
  const timeoutMs = Number(args["timeout-s"]) * 1000;

  const viewport = { width: 1600, height: 1150 };
  const page = await browser.newPage({ viewport });
  try {
    await page.goto(`${args.rest}/#/job/running/${args.job}/overview`, { waitUntil: "networkidle" });
    const list = page.locator("flink-job-overview-list");
    const row = list.locator("tr.clickable", { hasText: args.vertex });
    await row.waitFor({ timeout: 60000 });
    // fold the menu on the left: room for the table's Parallelism column
    const fold = page.locator(".anticon-menu-fold").first();
    if (await fold.isVisible()) {
      await fold.click();
      await page.waitForTimeout(1000);
    }
    const plus = row.locator("button:has(.anticon-plus)");
    if ((await plus.count()) !== 1) throw new Error("no Scale column with a + button in the vertex table");

    // The editor: each + raises the vertex's desired parallelism by one, shown next to the current
    // one with a sync icon; 2.5 s after the last click the web UI GETs the job's resource
    // requirements, sets the vertex's upperBound and PUTs them back.
    const put = page.waitForRequest(
      (r) => r.method() === "PUT" && r.url().endsWith(`/jobs/${args.job}/resource-requirements`),
      { timeout: 30000 },
    );
    const stepAtClick = args["trainer-root"] ? trainerStep() : null;
    const history = (await rest(`/jobs/${args.job}/rescales/config`)).rescaleHistoryMax > 0;
    const rescalesBefore = history ? (await rest(`/jobs/${args.job}/rescales/overview`)).rescalesCounts : null;
    for (let i = from; i < to; i++) {
      await plus.click();
      await page.waitForTimeout(300);
    }
    await row.locator("td", { has: page.locator(".anticon-sync") }).filter({ hasText: String(to) })
      .waitFor({ timeout: 2000 });
    const request = await put;
    const putAt = Date.now();
    const sent = JSON.parse(request.postData() ?? "{}")[vertex.id]?.parallelism;
    const response = await request.response();
    if (sent?.upperBound !== to || !response?.ok()) {
      throw new Error(`the web UI sent ${JSON.stringify(sent)} for the vertex (HTTP ${response?.status()}), not upperBound ${to}`);
    }
    log(`the web UI sent PUT /jobs/${args.job}/resource-requirements: ${vertex.id} ${JSON.stringify(sent)}`);
    const notice = page.locator(".ant-notification-notice", { hasText: "Rescaling operation" });
    await notice.waitFor({ timeout: 10000 });
    await page.mouse.move(1, viewport.height - 1);
    await page.waitForTimeout(800); // the notice's slide-in
    const editorShot = await list.screenshot();
    const noticeShot = await notice.screenshot();

    // REST: the vertex at the new parallelism, every vertex RUNNING
    const states = new Set();
    let now, seconds;
    for (;;) {
      now = await rest(`/jobs/${args.job}`);
      states.add(now.state);
      const v = now.vertices.find((x) => x.id === vertex.id);
      if (["FAILED", "CANCELED", "FINISHED", "SUSPENDED"].includes(now.state)) {
        throw new Error(`the job is ${now.state} after the rescale request`);
      }
      if (v.parallelism === to && now.state === "RUNNING" && now.vertices.every((x) => x.status === "RUNNING")) break;
      if (Date.now() - putAt > timeoutMs) {
        throw new Error(`the parallelism did not change: ${args["timeout-s"]} s after the web UI's PUT the vertex runs ${v.parallelism} subtasks (${v.status}), job ${now.state}`);
      }
      await sleep(1000);
    }
    seconds = Math.round((Date.now() - putAt) / 1000);
    const parallelisms = now.vertices.map((x) => `${x.name.split(" ->")[0]}: ${x.parallelism}`).join(", ");
    log(`${seconds} s after the PUT the job runs ${parallelisms}; job states seen meanwhile: ${[...states].join(", ")}`);

    // the trainer goes on receiving batches
    let stepAtRescale = null, stepAfter = null;
    if (args["trainer-root"]) {
      stepAtRescale = trainerStep();
      const deadline = Date.now() + 120000;
      while ((stepAfter = trainerStep()) < stepAtRescale + 3) {
        if (Date.now() > deadline) {
          throw new Error(`the trainer acknowledged step ${stepAfter} 120 s after the rescale, ${stepAtRescale} at it`);
        }
        await sleep(1000);
      }
      log(`trainer (lowest rank): step ${stepAtClick} at the click, ${stepAtRescale} at the rescale, ${stepAfter} now`);
    }

    // no failure: no exception, at most the rescale's own restart, RUNNING
    const exceptions = (await rest(`/jobs/${args.job}/exceptions`)).exceptionHistory?.entries ?? [];
    if (exceptions.length > 0) {
      throw new Error(`the job failed ${exceptions.length} time(s): ${exceptions[0].exceptionName}`);
    }
    const restarts = Number((await rest(`/jobs/${args.job}/metrics?get=numRestarts`))[0]?.value);
    if (!(restarts <= 1)) throw new Error(`the job restarted ${restarts} times, more than the rescale's one`);
    const final = await rest(`/jobs/${args.job}`);
    if (final.state !== "RUNNING") throw new Error(`the job is ${final.state} at the end`);
    log(`job RUNNING, no exception, numRestarts ${restarts}`);
    // Flink's own record of the rescale (the job's Rescales tab), where the cluster keeps a history
    // (web.adaptive-scheduler.rescale-history.size > 0; the job's first scheduling counts as one)
    if (history) {
      let counts;
      for (let i = 0; i < 30; i++) {
        counts = (await rest(`/jobs/${args.job}/rescales/overview`)).rescalesCounts;
        if (counts.completed > rescalesBefore.completed && counts.inProgress === 0) break;
        await sleep(1000);
      }
      log(`Flink's rescale history: ${JSON.stringify(rescalesBefore)} before the click, ${JSON.stringify(counts)} now`);
      if (!(counts.completed > rescalesBefore.completed) || counts.failed > rescalesBefore.failed) {
        throw new Error(`Flink's rescale history has no new completed rescale: ${JSON.stringify(rescalesBefore)} before, ${JSON.stringify(counts)} after`);
      }
    }

    // the web UI after the rescale: graph node and table at the new parallelism
    await row.locator(".anticon-sync").waitFor({ state: "detached", timeout: 30000 });
    await page.getByText(`Parallelism: ${to}`).first().waitFor({ timeout: 30000 });
    await page.waitForTimeout(4000); // a refresh of the metrics in the graph's nodes
    const listBox = await list.boundingBox();
    const height = Math.min(viewport.height, Math.ceil(listBox.y + listBox.height + 16));
    const afterShot = await page.screenshot({ clip: { x: 0, y: 0, width: viewport.width, height } });

    await compose({ from, to, seconds, stepAtClick, stepAtRescale, stepAfter, editorShot, noticeShot, afterShot });
  } catch (e) {
    await page.screenshot({ path: `${args.out}.failed.png` }).catch(() => {});
    throw new Error(`${e.message} (page saved as ${args.out}.failed.png)`);
  }
}

// One PNG: captions, the table with the editor's pending value and the web UI's notice, then the
// page after the rescale.
async function compose(r) {
  const src = (png) => `data:image/png;base64,${png.toString("base64")}`;
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const trainer = r.stepAtClick === null ? "" :
    ` The trainer (1.5 s per step, both ranks) was at step ${r.stepAtClick} at the click, at step
    ${r.stepAtRescale} when the rescale was done, and reads on (step ${r.stepAfter} when this was taken).`;
  const html = `<!doctype html><html><head><style>
    body { margin: 0; width: 1600px; background: #f0f2f5; font: 17px/1.45 "DejaVu Sans", sans-serif; color: #222; }
    .cap { display: flex; align-items: center; gap: 24px; padding: 14px 24px; }
    .cap p { flex: 1; margin: 0; }
    code { font-size: 15px; background: #e4e7ec; padding: 1px 4px; border-radius: 3px; }
    img.full { display: block; }
    img.list { display: block; margin: 0 0 8px 24px; border: 1px solid #d9d9d9; }
  </style></head><body>
  <div class="cap"><p><b>1.</b> The job's <i>Overview</i> tab under the adaptive scheduler with
    <code>web.rescale.enable: true</code>: <b>+</b> clicked ${r.to - r.from} times in the <i>Scale</i>
    column of <code>${esc("Source: jsonl-source -> ...")}</code> (the CPU stages); the <i>Parallelism</i>
    column shows ${r.from} &#x27F3; ${r.to}, and 2.5 s later the web UI sends
    <code>PUT /jobs/&lt;id&gt;/resource-requirements</code> (upperBound ${r.to}).</p>
    <img src="${src(r.noticeShot)}"></div>
  <img class="list" src="${src(r.editorShot)}">
  <div class="cap"><p><b>2.</b> ${r.seconds} s later, without a savepoint or a resubmission: the CPU
    stages run ${r.to} subtasks (graph and table), the sink still one per DP rank, the job RUNNING
    with no failure.${trainer}</p></div>
  <img class="full" src="${src(r.afterShot)}">
  </body></html>`;
  const page = await browser.newPage({ viewport: { width: 1600, height: 800 } });
  await page.setContent(html, { waitUntil: "load" });
  await page.screenshot({ path: args.out, fullPage: true });
}
