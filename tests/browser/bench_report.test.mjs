// The `tokentap bench --html` report in a real headless browser (Debian's
// chromium driven by playwright-core): open the file, check every chart drew
// one line per target with a point per load level, the tables list every
// target, nothing but the file itself was loaded (the report is
// self-contained) and no script error happened; save a screenshot.
//
// Run by tests/bench.rs; by hand:
//   TOKENTAP_BENCH_REPORT=/tmp/report.html TOKENTAP_EXPECT_TARGETS=a,b TOKENTAP_EXPECT_POINTS=2 node bench_report.test.mjs
//
// Environment:
//   TOKENTAP_BENCH_REPORT    the HTML report file; required
//   TOKENTAP_EXPECT_TARGETS  comma-separated target names that must have a line; required
//   TOKENTAP_EXPECT_POINTS   load levels, i.e. points per line; required
//   TOKENTAP_SCREENSHOT      where to save the PNG (default target/bench-report.png)
//   CHROMIUM                 browser binary (default /usr/bin/chromium)

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { withChromium } from "./harness.mjs";

const report = process.env.TOKENTAP_BENCH_REPORT;
const targets = (process.env.TOKENTAP_EXPECT_TARGETS ?? "").split(",").map(s => s.trim()).filter(Boolean);
const points = Number(process.env.TOKENTAP_EXPECT_POINTS ?? 0);
const screenshot = resolve(process.env.TOKENTAP_SCREENSHOT ?? "target/bench-report.png");
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";

function check(cond, message) {
  if (!cond) {
    console.error(`bench report test FAILED: ${message}`);
    process.exitCode = 1;
    throw new Error(message);
  }
}

async function main() {
  check(report, "set TOKENTAP_BENCH_REPORT to the HTML report");
  check(targets.length > 0, "set TOKENTAP_EXPECT_TARGETS to the targets measured");
  check(points > 0, "set TOKENTAP_EXPECT_POINTS to the number of load levels");
  const url = pathToFileURL(resolve(report)).href;
  await withChromium(executablePath, async context => {
    const page = context.pages()[0] ?? (await context.newPage());
    const problems = [];
    page.on("pageerror", e => problems.push(`page error: ${e.message}`));
    page.on("console", m => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
    page.on("request", r => { if (r.url() !== url) problems.push(`request besides the report itself: ${r.url()}`); });

    await page.goto(url, { waitUntil: "load" });
    check(/tokentap bench report/.test(await page.title()), `unexpected title ${JSON.stringify(await page.title())}`);

    const charts = await page.$$eval("figure.chart", figs => figs.map(f => {
      const svg = f.querySelector("svg");
      const box = svg.getBoundingClientRect();
      return {
        chart: f.dataset.chart,
        width: box.width,
        height: box.height,
        series: [...f.querySelectorAll("g.series")].map(g => ({
          target: g.dataset.target,
          points: (g.querySelector("polyline")?.getAttribute("points") ?? "").trim().split(/\s+/).filter(Boolean).length,
          dots: g.querySelectorAll("circle").length,
        })),
      };
    }));
    for (const name of ["ttft", "decode", "throughput"]) {
      check(charts.some(c => c.chart === name), `no ${name} chart; charts: ${JSON.stringify(charts.map(c => c.chart))}`);
    }
    for (const c of charts) {
      check(c.width > 100 && c.height > 100, `${c.chart} chart renders at ${c.width}×${c.height}`);
      for (const t of targets) {
        const s = c.series.find(s => s.target === t);
        check(s, `${c.chart} chart has no line for ${t}: ${JSON.stringify(c.series)}`);
        check(s.points === points && s.dots === points,
          `${c.chart} chart: ${t} has ${s.points} line points and ${s.dots} dots, want ${points}`);
      }
    }
    const tables = await page.$$eval("table.levels", ts => ts.map(t => ({
      target: t.dataset.target,
      rows: t.querySelectorAll("tbody tr").length,
    })));
    for (const t of targets) {
      const table = tables.find(x => x.target === t);
      check(table && table.rows === points, `table for ${t}: ${JSON.stringify(table)} (want ${points} rows)`);
    }
    check(problems.length === 0, problems.join("; "));
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`bench report OK: ${charts.length} charts, ${targets.length} targets; screenshot ${screenshot}`);
  });
}

main().catch(e => {
  if (!process.exitCode) {
    console.error(`bench report test FAILED: ${e.stack ?? e}`);
    process.exitCode = 1;
  }
});
