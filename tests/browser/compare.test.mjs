// The dashboard's Compare view in a real headless browser (Debian's
// chromium driven by playwright-core): open the page, pick side A and side
// B, and check that the cells table shows, per prompt size and load class,
// the figures /api/compare gave for those sides (medians with their spread,
// the ratio B/A), that the differences between the sides are said, and
// that the two charts (TTFT and decode tokens/s against the load class)
// draw one line per side through the same medians. No request leaves the
// admin origin and no script error happens; a screenshot is saved.
//
// Run by tests/dashboard.rs; by hand:
//   TOKENTAP_DASHBOARD_URL=http://127.0.0.1:9464/ TOKENTAP_COMPARE_SIDES=r:a,r:b \
//   TOKENTAP_EXPECT_COMPARE="$(curl -s 'http://127.0.0.1:9464/api/compare?side=r:a&side=r:b')" \
//   node compare.test.mjs
//
// Environment:
//   TOKENTAP_DASHBOARD_URL   the dashboard (the admin listener's `/`); required
//   TOKENTAP_COMPARE_SIDES   side A and side B as route:model, comma-separated; required
//   TOKENTAP_EXPECT_COMPARE  /api/compare's answer for those sides (JSON); required
//   TOKENTAP_SCREENSHOT      where to save the PNG (default target/compare.png)
//   CHROMIUM                 browser binary (default /usr/bin/chromium)
//   TOKENTAP_WAIT_MS         how long to wait for the view (default 20000)

import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { checks, open, withChromium } from "./harness.mjs";

const url = process.env.TOKENTAP_DASHBOARD_URL;
const sides = (process.env.TOKENTAP_COMPARE_SIDES ?? "").split(",").map(s => s.trim()).filter(Boolean);
const expected = JSON.parse(process.env.TOKENTAP_EXPECT_COMPARE ?? "null");
const screenshot = resolve(process.env.TOKENTAP_SCREENSHOT ?? "target/compare.png");
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const waitMs = Number(process.env.TOKENTAP_WAIT_MS ?? 20000);

const { fail, check } = checks("compare view test");

// The page's own number formats (src/admin/dashboard.html).
const rate = v => v == null ? "—" : v >= 100 ? v.toFixed(0) : v.toFixed(1);
const ms = v => v == null ? "—" : v >= 100 ? v.toFixed(0) + " ms" : v.toFixed(1) + " ms";
const ratio = r => r == null ? "—" : r.toFixed(2);

async function main() {
  check(url, "set TOKENTAP_DASHBOARD_URL to the dashboard URL");
  check(sides.length === 2, "set TOKENTAP_COMPARE_SIDES to two route:model sides");
  check(expected && Array.isArray(expected.cells) && expected.cells.length > 0,
    "set TOKENTAP_EXPECT_COMPARE to /api/compare's answer, with cells");
  await withChromium(executablePath, run);
}

async function run(context) {
  const { page, problems } = await open(context, url, check);

  // The side lists come from /api/compare with no side.
  try {
    await page.waitForFunction(want => want.every(s =>
      [...document.querySelectorAll("#compare-a option")].some(o => o.value === s)), sides, { timeout: waitMs, polling: 200 });
  } catch {
    const shown = await page.$$eval("#compare-a option", os => os.map(o => o.value));
    fail(`side A's list never offered ${sides.join(", ")} within ${waitMs} ms; it offers ${JSON.stringify(shown)}`);
  }
  // Pick them the other way round first, then as asked: the view follows the pick.
  await page.selectOption("#compare-a", sides[1]);
  await page.selectOption("#compare-b", sides[0]);
  await page.waitForFunction(() => document.querySelector("#compare-legend")?.textContent.includes("A "), null, { timeout: waitMs });
  await page.selectOption("#compare-a", sides[0]);
  await page.selectOption("#compare-b", sides[1]);
  const want = expected.cells.map(c => `${c.prompt_size}/${c.load_class}`);
  try {
    await page.waitForFunction(([a, b, cells]) => {
      const legend = document.querySelector("#compare-legend")?.textContent ?? "";
      return legend.includes(`A ${a}`) && legend.includes(`B ${b}`) &&
        cells.every(k => document.querySelector(`#compare-body tr[data-cell="${k}"]`));
    }, [sides[0], sides[1], want], { timeout: waitMs, polling: 200 });
  } catch {
    const shown = await page.$$eval("#compare-body tr", trs => trs.map(tr => tr.innerText.replace(/\s+/g, " ")));
    fail(`the cells ${want.join(", ")} never showed for ${sides.join(" vs ")}; table: ${JSON.stringify(shown)}`);
  }

  // Every cell: requests, each side's median (and its spread), the ratio.
  const header = await page.$$eval("#compare-table thead th", ths => ths.map(th => th.textContent.trim()));
  check(header.length === 15, `15 columns, got ${JSON.stringify(header)}`);
  for (const cell of expected.cells) {
    const key = `${cell.prompt_size}/${cell.load_class}`;
    const tds = await page.$$eval(`#compare-body tr[data-cell="${key}"] td`, xs => xs.map(td => ({
      main: td.firstChild?.textContent?.trim() ?? "", small: td.querySelector("small")?.textContent ?? "", text: td.textContent.trim(),
    })));
    const [a, b] = cell.sides;
    const n = s => `${s.requests.toLocaleString()}${s.enough_data ? "" : "*"}`;
    check(tds[2].text === `${n(a)} · ${n(b)}`, `${key}: requests ${tds[2].text}, expected ${n(a)} · ${n(b)}`);
    const figures = [["ttft_ms", ms, 3], ["prefill_tps", rate, 6], ["decode_tps", rate, 9], ["duration_ms", ms, 12]];
    for (const [f, fmt, col] of figures) {
      cell.sides.forEach((s, k) => {
        const got = tds[col + k], v = s[f];
        check(got.main === (v == null ? "—" : fmt(v.median)), `${key} ${f} ${"AB"[k]}: shows ${got.main}, API median ${v && v.median}`);
        const bare = t => t.replace(/ ms$/, "");
        if (v != null) check(got.small === `${bare(fmt(v.min))}–${bare(fmt(v.max))}`, `${key} ${f} ${"AB"[k]}: spread ${got.small}, API ${v.min}–${v.max}`);
      });
      const r = cell.ratio ? cell.ratio[f] : null;
      check(tds[col + 2].text === ratio(r), `${key} ${f} B/A: shows ${tds[col + 2].text}, API ${r}`);
    }
  }

  // The differences between the sides, said in plain text.
  const diff = await page.$eval("#compare-diff", e => ({ hidden: e.hidden, text: e.textContent }));
  for (const d of expected.differences ?? []) {
    check(!diff.hidden && diff.text.includes(d), `differences: "${d}" not in ${JSON.stringify(diff)}`);
  }
  if (expected.like_with_like === false) check(diff.text.includes("not like with like"), `not like with like unsaid: ${diff.text}`);

  // The charts: one line per side against the load class, through the
  // medians of the drawn prompt size.
  const size = await page.$eval("#compare-size", s => s.value);
  for (const [id, f] of [["chart-compare-ttft", "ttft_ms"], ["chart-compare-tps", "decode_tps"]]) {
    for (const [k, side] of ["A", "B"].entries()) {
      const points = await page.$$eval(`#${id} circle[data-side="${side}"]`, cs => cs.map(c => [c.dataset.load, Number(c.dataset.value)]));
      const wantPoints = expected.cells.filter(c => c.prompt_size === size && c.sides[k][f] != null)
        .map(c => [c.load_class, c.sides[k][f].median]);
      check(points.length === wantPoints.length && points.length > 0,
        `${id} side ${side}: points ${JSON.stringify(points)}, expected ${JSON.stringify(wantPoints)}`);
      for (const [lc, v] of wantPoints) {
        check(points.some(([l, p]) => l === lc && Math.abs(p - v) < 1e-9), `${id} side ${side} load ${lc}: no point at ${v} in ${JSON.stringify(points)}`);
      }
      check(await page.$(`#${id} path[data-side="${side}"]`) || points.length === 1, `${id}: no line for side ${side}`);
    }
  }
  check(problems.length === 0, problems.join("; "));

  mkdirSync(dirname(screenshot), { recursive: true });
  await page.locator("#compare").scrollIntoViewIfNeeded();
  await page.locator("#compare").screenshot({ path: screenshot });
  console.log(`compare view test ok: ${expected.cells.length} cells for ${sides.join(" vs ")}; screenshot ${screenshot}`);
}

main().catch(e => {
  if (!process.exitCode) console.error(`compare view test FAILED: ${e.stack || e}`);
  process.exitCode = 1;
});
