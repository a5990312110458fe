// Screenshot of the Flink web UI showing Stoker's tuning metrics, by headless Chromium driven by
// playwright-core. Run through scripts/webui-screenshot.sh, which starts the cluster and a job.
//
//   node screenshot.mjs --rest http://127.0.0.1:8081 --job <job-id> --out docs/webui-metrics.png
//        [--chromium /usr/bin/chromium]
//
// Opens the job's graph, selects the sink operator, opens its Metrics tab and adds the sink's
// per-rank metrics (trainerWaitTimeRatio, batchesAhead, trainerConsumedStep), then saves a PNG.
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
      default: "rank.0.trainerWaitTimeRatio,rank.1.trainerWaitTimeRatio,rank.0.batchesAhead,rank.1.batchesAhead,rank.0.trainerConsumedStep",
    },
  },
});
if (!args.job) throw new Error("--job <job-id> is required");

const job = await (await fetch(`${args.rest}/jobs/${args.job}`)).json();
const vertex = job.vertices.find((v) => v.name.includes(args.vertex));
if (!vertex) throw new Error(`no vertex named like ${args.vertex} in job ${args.job}`);

const browser = await chromium.launch({
  executablePath: args.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  // The web UI routes: job overview with one vertex selected, its Metrics tab.
  await page.goto(`${args.rest}/#/job/running/${args.job}/overview/${vertex.id}/metrics`, {
    waitUntil: "networkidle",
  });
  try {
    await page.waitForSelector("text=Add metric", { timeout: 120000 });
  } catch (e) {
    await page.screenshot({ path: `${args.out}.failed.png` });
    throw new Error(`the Metrics tab did not show (page saved as ${args.out}.failed.png): ${e}`);
  }
  for (const name of args.metrics.split(",")) {
    // The "Add metric" drop-down is a searchable select: open it, type the name, pick the match.
    await page.click("text=Add metric");
    await page.keyboard.type(name);
    const option = page.locator("nz-option-item", { hasText: name }).first();
    await option.waitFor({ timeout: 15000 });
    await option.click();
    await page.keyboard.press("Escape");
  }
  // let the charts collect a few samples (the UI polls the REST API every few seconds)
  await page.waitForTimeout(12000);
  await page.screenshot({ path: args.out, fullPage: false });
  console.log(`saved ${args.out}`);
} finally {
  await browser.close();
}
