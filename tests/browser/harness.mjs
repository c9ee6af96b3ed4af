// Shared by the browser tests: failing with a message that names the test,
// a headless Chromium (Debian's, driven by playwright-core) in a throwaway
// profile, and a watch on a page for script errors and requests that
// leave its origin.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

// `fail` and `check` for the test called `name`: the message goes to
// stderr, the exit code is 1, and the run stops.
export function checks(name) {
  const fail = message => {
    console.error(`${name} FAILED: ${message}`);
    process.exitCode = 1;
    throw new Error(message);
  };
  const check = (cond, message) => { if (!cond) fail(message); };
  return { fail, check };
}

// Run `fn(context)` in a fresh headless Chromium at 1440×1000, then close
// it and remove its profile.
export async function withChromium(executablePath, fn) {
  const userDataDir = mkdtempSync(join(tmpdir(), "tokentap-chromium-"));
  let context;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"],
      viewport: { width: 1440, height: 1000 },
      deviceScaleFactor: 1,
    });
    return await fn(context);
  } finally {
    await context?.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  }
}

// The problems seen on `page` so far (a live array): page errors, console
// errors, and requests outside `origin`.
export function watch(page, origin) {
  const problems = [];
  page.on("pageerror", e => problems.push(`page error: ${e.message}`));
  page.on("console", m => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
  page.on("request", r => {
    const u = r.url();
    if (!u.startsWith(origin) && !u.startsWith("data:")) problems.push(`request outside the admin origin: ${u}`);
  });
  return problems;
}

// The context's page at `url`: loaded, answered with success, watched.
export async function open(context, url, check) {
  const page = context.pages()[0] ?? (await context.newPage());
  const problems = watch(page, new URL(url).origin);
  const res = await page.goto(url, { waitUntil: "load" });
  check(res && res.ok(), `GET ${url} answered ${res && res.status()}`);
  return { page, problems };
}
