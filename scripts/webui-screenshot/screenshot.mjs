// Screenshot of the Flink web UI showing Stoker's tuning metrics, by headless Chromium driven by
// playwright-core. Run through scripts/webui-screenshot.sh, which starts the cluster and a job.
//
//   node screenshot.mjs --rest http://127.0.0.1:8081 --job <job-id> --out docs/webui-metrics.png
//        [--chromium /usr/bin/chromium]
//
// Opens the job's graph, selects the sink operator, opens its Metrics tab and adds the sink's
// metrics of rank 0 (trainerWaitTimeRatio, batchesAhead, trainerConsumedStep) as full-width
// charts, then saves a PNG.
import { chromium } from "playwright-core";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    rest: { type: "string", default: "http://127.0.0.1:8081" },
    job: { type: "string" },
    out: { type: "string", default: "docs/webui-metrics.png" },
    chromium: { type: "string", default: process.env.CHROMIUM || "/usr/bin/chromium" },
    vertex: { type: "string", default: "arrow-shm-sink" },
    metrics: {
      type: "string",
      default: "rank.0.trainerWaitTimeRatio,rank.0.batchesAhead,rank.0.trainerConsumedStep",
    },
  },
});
if (!args.job) throw new Error("--job <job-id> is required");

const job = await (await fetch(`${args.rest}/jobs/${args.job}`)).json();
const vertex = job.vertices.find((v) => v.name.includes(args.vertex));
if (!vertex) throw new Error(`no vertex named like ${args.vertex} in job ${args.job}`);

const viewport = { width: 1600, height: 2000 };
const browser = await chromium.launch({
  executablePath: args.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
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
  console.log(`saved ${args.out}`);
} finally {
  await browser.close();
}
