// The live dashboard in a real headless browser (Debian's chromium driven by
// playwright-core): open the page, wait until the recent-requests table shows
// the models just sent through the proxy, check the per-model rows carry
// non-zero figures, the charts drew every model, nothing outside the admin
// origin was requested and no script error happened; save a screenshot.
//
// Run by tests/dashboard.rs; by hand:
//   TOKENTAP_DASHBOARD_URL=http://127.0.0.1:9464/ TOKENTAP_EXPECT_MODELS=a,b node dashboard.test.mjs
//
// Environment:
//   TOKENTAP_DASHBOARD_URL  the dashboard (the admin listener's `/`); required
//   TOKENTAP_EXPECT_MODELS  comma-separated model names that must show up; required
//   TOKENTAP_SCREENSHOT     where to save the PNG (default target/dashboard.png)
//   CHROMIUM                browser binary (default /usr/bin/chromium)
//   TOKENTAP_WAIT_MS        how long to wait for the models (default 20000)
//   TOKENTAP_EXPECT_REASONING  comma-separated models whose responses reasoned:
//                           the reasoning table must show their visible TTFT
//                           after their TTFT, and a thinking time (optional)
//   TOKENTAP_EXPECT_SESSIONS  comma-separated agent session ids, costliest
//                           first: the sessions view must list them in that
//                           order by cost, with a cost, and by time waited
//                           (optional)
//   TOKENTAP_EXPECT_SESSION_ROWS  at least this many agent sessions, in any
//                           order, each with a cost (optional; `tokentap demo`)
//   TOKENTAP_EXPECT_COST_NOTE  text the cost panel must say in plain text
//                           (optional; the demo's "demo prices")
//   TOKENTAP_EXPECT_PREFILL  comma-separated models that must show a prefill
//                           rate (default: every model; the demo's OpenAI
//                           requests without usage have no input count)
//
// Always checked: the charts' title names the time their axis draws, and
// when span export is off the recent-requests table says so in plain text.

import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { checks, open, withChromium } from "./harness.mjs";

const url = process.env.TOKENTAP_DASHBOARD_URL;
const models = (process.env.TOKENTAP_EXPECT_MODELS ?? "").split(",").map(s => s.trim()).filter(Boolean);
const screenshot = resolve(process.env.TOKENTAP_SCREENSHOT ?? "target/dashboard.png");
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const waitMs = Number(process.env.TOKENTAP_WAIT_MS ?? 20000);
const reasoners = (process.env.TOKENTAP_EXPECT_REASONING ?? "").split(",").map(s => s.trim()).filter(Boolean);
const sessions = (process.env.TOKENTAP_EXPECT_SESSIONS ?? "").split(",").map(s => s.trim()).filter(Boolean);
const sessionRows = Number(process.env.TOKENTAP_EXPECT_SESSION_ROWS ?? 0);
const costNote = process.env.TOKENTAP_EXPECT_COST_NOTE ?? "";
// Models whose recent requests all report input tokens (default: all).
const prefillModels = process.env.TOKENTAP_EXPECT_PREFILL
  ? process.env.TOKENTAP_EXPECT_PREFILL.split(",").map(s => s.trim()).filter(Boolean)
  : models;

const { fail, check } = checks("dashboard test");

async function main() {
  check(url, "set TOKENTAP_DASHBOARD_URL to the dashboard URL");
  check(models.length > 0, "set TOKENTAP_EXPECT_MODELS to the models sent through the proxy");
  await withChromium(executablePath, run);
}

async function run(context) {
  const { page, problems } = await open(context, url, check);

  check(/tokentap/.test(await page.title()), `unexpected page title ${JSON.stringify(await page.title())}`);

  // The page polls /api/live every second; the aggregator publishes every second.
  try {
    await page.waitForFunction(
      want => {
        // A model counts once a request of it completed (an error alone has no figures).
        const seen = new Set([...document.querySelectorAll("#recent-body tr")]
          .filter(tr => tr.querySelector(".pill.ok")).map(tr => tr.dataset.model));
        return want.every(m => seen.has(m));
      },
      models,
      { timeout: waitMs, polling: 200 },
    );
  } catch {
    const shown = await page.$$eval("#recent-body tr", trs => trs.map(tr => tr.innerText.replace(/\s+/g, " ")));
    fail(`recent requests never showed ${models.join(", ")} within ${waitMs} ms; table: ${JSON.stringify(shown)}`);
  }

  // Per-model series rows: non-zero rate, TTFT and tokens/s.
  const rows = await page.$$eval("#series-body tr[data-model]", trs => trs.map(tr => ({
    model: tr.dataset.model,
    cells: [...tr.querySelectorAll("td")].map(td => td.textContent.trim()),
  })));
  const header = await page.$$eval("#series thead th", ths => ths.map(th => th.textContent.trim()));
  const col = name => {
    const i = header.indexOf(name);
    check(i >= 0, `series table has no "${name}" column: ${JSON.stringify(header)}`);
    return i;
  };
  const number = text => parseFloat(text.replace(/[^0-9.]/g, ""));
  // A model may have several rows (one per tenant); one of them, at least,
  // has served and decoded (a row may hold only a request in flight).
  const figures = ["Req/s", "TTFT p50", "TTFT p95", "Tok/s p50", "Tok/s p5", "Requests"];
  for (const model of models) {
    const mine = rows.filter(r => r.model === model);
    check(mine.length > 0, `no series row for ${model}; rows: ${JSON.stringify(rows)}`);
    const full = mine.find(row => figures.every(name => number(row.cells[col(name)]) > 0));
    check(full, `${model}: no series row with non-zero ${figures.join(", ")}; rows: ${JSON.stringify(mine)}`);
  }

  // The JSON the page reads agrees.
  const snap = await page.evaluate(async () => (await fetch("api/live", { cache: "no-store" })).json());
  const meta = await page.$eval("#meta", e => e.textContent);
  check(snap.websocket_sessions === 0 && meta.includes("websocket sessions 0"),
    `no WebSocket session open: api/live says ${snap.websocket_sessions}, page says ${JSON.stringify(meta)}`);
  for (const model of models) {
    const series = snap.series.filter(s => s.model === model);
    check(series.length > 0, `api/live has no series for ${model}`);
    check(series.some(s => s.rps > 0 && s.ttft_p50_s > 0 && s.tps_p50 > 0 && s.window.tokens_out > 0),
      `api/live figures for ${model} should be non-zero in a series: ${JSON.stringify(series)}`);
    check(snap.models.some(m => m.model === model), `no timeline for ${model}`);
    check(snap.recent.some(r => r.model === model && r.outcome === "complete"), `no complete recent request for ${model}`);
  }

  // Charts: one line (or dot) per model in both.
  for (const id of ["chart-ttft", "chart-tps"]) {
    const strokes = await page.$$eval(`#${id} path[stroke], #${id} circle`, els =>
      new Set(els.map(e => e.getAttribute("stroke") ?? e.getAttribute("fill"))).size);
    check(strokes >= models.length, `#${id} drew ${strokes} series, expected ${models.length}`);
  }
  // Reasoning table: visible TTFT beside TTFT for the models that reasoned.
  const reasoningRows = await page.$$eval("#reasoning-body tr[data-model]", trs => trs.map(tr => ({
    model: tr.dataset.model,
    cells: [...tr.querySelectorAll("td")].map(td => td.textContent.trim()),
  })));
  const rHeader = await page.$$eval("#reasoning thead th", ths => ths.map(th => th.textContent.trim()));
  const rCol = name => {
    const i = rHeader.indexOf(name);
    check(i >= 0, `reasoning table has no "${name}" column: ${JSON.stringify(rHeader)}`);
    return i;
  };
  const ms = text => text.endsWith(" ms") ? number(text) / 1000 : number(text);
  for (const model of reasoners) {
    const row = reasoningRows.find(r => r.model === model);
    check(row, `no reasoning row for ${model}; rows: ${JSON.stringify(reasoningRows)}`);
    const [ttft, visible, thinking] = ["TTFT p50", "Visible TTFT p50", "Thinking p50"].map(n => ms(row.cells[rCol(n)]));
    check(ttft > 0 && visible > ttft && thinking > 0,
      `${model}: reasoning row should show TTFT < visible TTFT and a thinking time: ${JSON.stringify(row.cells)}`);
    const s = snap.series.find(x => x.model === model);
    check(s && s.reasoning_requests > 0 && s.visible_ttft_p50_s > s.ttft_p50_s && s.thinking_p50_s > 0,
      `api/live reasoning figures for ${model}: ${JSON.stringify(s)}`);
  }
  for (const model of models.filter(m => !reasoners.includes(m))) {
    check(!reasoningRows.some(r => r.model === model), `${model} never reasoned but has a reasoning row`);
  }
  // Prefill vs decode, served throughput and load, per model.
  const measureHeader = await page.$$eval("#permodel thead th", ths => ths.map(th => th.textContent.trim()));
  const measureRows = await page.$$eval("#permodel-body tr[data-model]", trs => trs.map(tr => ({
    model: tr.dataset.model,
    cells: [...tr.querySelectorAll("td")].map(td => td.textContent.trim()),
  })));
  for (const model of models) {
    const row = measureRows.find(r => r.model === model);
    check(row, `no prefill/decode row for ${model}; rows: ${JSON.stringify(measureRows)}`);
    for (const name of ["TTFT p50", "Prefill tok/s p50", "Decode tok/s p50", "Tokens served/s"]) {
      if (name.startsWith("Prefill") && !prefillModels.includes(model)) continue;
      const i = measureHeader.indexOf(name);
      check(i >= 0, `per-model table has no "${name}" column: ${JSON.stringify(measureHeader)}`);
      check(number(row.cells[i]) > 0, `${model}: "${name}" should be non-zero, shows ${JSON.stringify(row.cells[i])}`);
    }
  }
  // Tokens served per second divide the tokens by the time they were served
  // in: since start until the window fills, not the whole window. The page
  // rendered a moment before api/live was read: a few seconds of slack.
  const oldestAge = (snap.generated_at_ms - Math.min(...snap.models.flatMap(m => m.points.map(p => p.t_ms)))) / 1000;
  const coveredS = Math.min(snap.window_s, Math.max(snap.bucket_s, oldestAge));
  for (const model of models) {
    const tokens = snap.series.filter(s => s.model === model).reduce((a, s) => a + s.window.tokens_in + s.window.tokens_out, 0);
    const row = measureRows.find(r => r.model === model);
    const shown = number(row.cells[measureHeader.indexOf("Tokens served/s")]);
    const [lo, hi] = [0.8 * tokens / (coveredS + 3), 1.2 * tokens / Math.max(1, coveredS - 3)];
    check(shown >= lo && shown <= hi,
      `${model}: tokens served/s shows ${shown}; api/live has ${tokens} tokens over ${coveredS} s, so ${lo.toFixed(1)}..${hi.toFixed(1)}`);
  }
  const loadDots = await page.$$eval("#chart-load circle", els => new Set(els.map(e => e.getAttribute("fill"))).size);
  check(loadDots >= models.length, `#chart-load drew ${loadDots} models' points, expected ${models.length}`);
  const done = snap.recent.filter(r => r.outcome === "complete");
  // Prefill is known exactly when the input tokens are.
  check(done.some(r => r.prefill_tps > 0) &&
      done.every(r => r.in_flight >= 1 && (r.tokens_in > 0 ? r.prefill_tps > 0 : r.prefill_tps == null)),
    `complete recent requests carry in_flight >= 1, and prefill_tps > 0 when their input tokens are known: ${JSON.stringify(done.map(r => [r.in_flight, r.tokens_in, r.prefill_tps]))}`);

  // The charts' title names the time the axis draws: its left end, which
  // is the oldest point's age (at least 60 s), not the configured window.
  const chartNote = await page.$eval("#chart-note", e => e.textContent);
  const axisLeft = await page.$eval("#chart-ttft text[text-anchor=start]", e => e.textContent.trim());
  check(axisLeft.startsWith("−") && chartNote.includes(`over the last ${axisLeft.slice(1)}`),
    `the charts' title ${JSON.stringify(chartNote)} should name the time their axis draws (left end ${JSON.stringify(axisLeft)})`);
  const axisSecs = number(axisLeft) * (axisLeft.endsWith("min") ? 60 : 1);
  const oldest = Math.min(...snap.models.flatMap(m => m.points.map(p => p.t_ms)));
  const drawn = Math.max(60, (snap.generated_at_ms - oldest) / 1000);
  check(Math.abs(axisSecs - drawn) <= snap.bucket_s + 3,
    `the charts draw ${axisSecs} s, the timelines in api/live cover ${drawn} s`);
  if (drawn < snap.window_s - snap.bucket_s) {
    check(!chartNote.includes(`over the last ${Math.round(snap.window_s / 60)} min`) || axisSecs >= snap.window_s - snap.bucket_s,
      `the charts' title claims the ${snap.window_s} s window but they draw ${axisSecs} s: ${JSON.stringify(chartNote)}`);
  }

  // Export off: said once in plain text above the struck-through trace ids.
  const exportNote = await page.$eval("#recent-export", e => (e.hidden ? "" : e.textContent));
  check(typeof snap.span_export === "boolean", `api/live says whether spans are exported: ${snap.span_export}`);
  if (snap.span_export) {
    check(exportNote === "", `span export is on, yet the page says ${JSON.stringify(exportNote)}`);
  } else {
    check(/export is off/.test(exportNote), `span export is off, but the recent requests do not say so: ${JSON.stringify(exportNote)}`);
    const struck = await page.$$eval("#recent-body td.name.dim", tds => tds.filter(td => /^[0-9a-f]{8}$/.test(td.textContent)).map(td => td.classList.contains("gone")));
    check(struck.length > 0 && struck.every(Boolean), `with export off every trace id is struck through: ${JSON.stringify(struck)}`);
  }

  // Cost: a spend row with tokens per dollar for every (priced) model, a
  // tenant row, and the totals agree with api/live.
  const costRows = await page.$$eval("#cost-models-body tr[data-model]", trs => trs.map(tr => ({
    model: tr.dataset.model,
    cells: [...tr.querySelectorAll("td")].map(td => td.textContent.trim()),
  })));
  // A model the price table does not know (an OpenAI route serving
  // deepseek-reasoner) belongs in the unpriced table instead.
  const unpricedShown = await page.$$eval("#cost-unpriced-body tr[data-model]", trs => trs.map(tr => tr.dataset.model));
  const priced = model => snap.series.some(s => s.model === model && s.window.cost && s.window.cost.priced > 0);
  for (const model of models.filter(m => !priced(m))) {
    check(unpricedShown.includes(model), `${model} has no price but is not listed as unpriced: ${JSON.stringify(unpricedShown)}`);
  }
  check(models.some(priced), `no model was priced: ${JSON.stringify(snap.series.map(s => [s.model, s.window.cost]))}`);
  for (const model of models.filter(priced)) {
    const row = costRows.find(r => r.model === model);
    check(row, `no cost row for ${model}; rows: ${JSON.stringify(costRows)}`);
    check(row.cells[1].startsWith("$") && number(row.cells[1]) > 0, `${model}: spend ${JSON.stringify(row.cells[1])}`);
    check(number(row.cells[3]) > 0 && number(row.cells[4]) >= number(row.cells[3]),
      `${model}: output and total tokens per dollar ${JSON.stringify(row.cells)}`);
  }
  const sourceNote = await page.$eval("#cost-source", e => (e.hidden ? "" : e.textContent));
  check(sourceNote === (snap.cost_note ?? ""), `the cost panel shows api/live's cost note ${JSON.stringify(snap.cost_note)}: ${JSON.stringify(sourceNote)}`);
  if (costNote) {
    check(sourceNote.includes(costNote), `the cost panel should say ${JSON.stringify(costNote)}: ${JSON.stringify(sourceNote)}`);
    check(unpricedShown.length === 0, `every model is priced, yet unpriced: ${JSON.stringify(unpricedShown)}`);
  }
  const tenantsShown = await page.$$eval("#cost-tenants-body tr[data-tenant]", trs => trs.length);
  check(tenantsShown > 0, "no tenant spend row");
  const spend = snap.series.reduce((a, s) => a + s.window.cost.usd, 0);
  check(spend > 0, `api/live spend should be positive: ${spend}`);

  // Agent sessions: the top by cost in the expected order, each with a
  // cost, and every one in the top by time waited with a wait.
  if (sessions.length) {
    try {
      await page.waitForFunction(
        want => want.every(id => document.querySelector(`#sessions-cost-body tr[data-session="${id}"]`)),
        sessions,
        { timeout: waitMs, polling: 200 },
      );
    } catch {
      const shown = await page.$$eval("#sessions-cost-body tr", trs => trs.map(tr => tr.innerText.replace(/\s+/g, " ")));
      fail(`the sessions view never showed ${sessions.join(", ")} within ${waitMs} ms; table: ${JSON.stringify(shown)}`);
    }
    const byCost = await page.$$eval("#sessions-cost-body tr[data-session]", trs => trs.map(tr => ({
      id: tr.dataset.session,
      cells: [...tr.querySelectorAll("td")].map(td => td.textContent.trim()),
    })));
    check(JSON.stringify(byCost.map(r => r.id)) === JSON.stringify(sessions),
      `sessions by cost should be ${JSON.stringify(sessions)}, shows ${JSON.stringify(byCost.map(r => r.id))}`);
    for (const r of byCost) {
      check(r.cells[1].startsWith("$") && number(r.cells[1]) > 0, `session ${r.id}: cost ${JSON.stringify(r.cells)}`);
      check(number(r.cells[2]) > 0 && number(r.cells[3]) > 0 && number(r.cells[4]) > 0,
        `session ${r.id}: requests and tokens ${JSON.stringify(r.cells)}`);
    }
    const byWait = await page.$$eval("#sessions-wait-body tr[data-session]", trs => trs.map(tr => ({
      id: tr.dataset.session,
      cells: [...tr.querySelectorAll("td")].map(td => td.textContent.trim()),
    })));
    for (const id of sessions) {
      const r = byWait.find(x => x.id === id);
      check(r && number(r.cells[1]) > 0 && number(r.cells[2]) > 0, `session ${id} by time waited: ${JSON.stringify(r)}`);
    }
    const api = await page.evaluate(async () => (await fetch("api/sessions?sort=cost", { cache: "no-store" })).json());
    check(api.sessions.length === sessions.length && api.sessions[0].id === sessions[0] && api.sessions[0].cost_usd > 0,
      `api/sessions agrees: ${JSON.stringify(api.sessions.map(x => [x.id, x.cost_usd]))}`);
  }

  if (sessionRows > 0) {
    try {
      await page.waitForFunction(
        n => document.querySelectorAll("#sessions-cost-body tr[data-session]").length >= n,
        sessionRows,
        { timeout: waitMs, polling: 200 },
      );
    } catch {
      const shown = await page.$$eval("#sessions-cost-body tr", trs => trs.map(tr => tr.innerText.replace(/\s+/g, " ")));
      fail(`the sessions view never showed ${sessionRows} sessions within ${waitMs} ms; table: ${JSON.stringify(shown)}`);
    }
    const rows = await page.$$eval("#sessions-cost-body tr[data-session]", trs => trs.map(tr =>
      [...tr.querySelectorAll("td")].map(td => td.textContent.trim())));
    for (const cells of rows) {
      check(cells[1].startsWith("$") && number(cells[1]) > 0 && number(cells[2]) > 0,
        `session row with a cost and requests: ${JSON.stringify(cells)}`);
    }
  }

  const status = await page.textContent("#status");
  check(/live/.test(status ?? ""), `status should say live, says ${JSON.stringify(status)}`);

  // A second poll must not break anything either.
  await page.waitForTimeout(1200);
  check(problems.length === 0, problems.join("; "));

  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true });
  // The same page in dark mode, beside it, for a look at both themes.
  await page.emulateMedia({ colorScheme: "dark" });
  await page.screenshot({ path: screenshot.replace(/\.png$/, "") + "-dark.png", fullPage: true });
  console.log(`dashboard test ok: ${models.length} models shown; screenshot ${screenshot}`);
}

main().catch(e => {
  if (!process.exitCode) console.error(`dashboard test FAILED: ${e && e.stack ? e.stack : e}`);
  process.exitCode = 1;
});
