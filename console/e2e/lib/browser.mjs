// The browser side of the tests: Debian's chromium driven by playwright-core,
// a page per test, sign-in, screenshots and the axe-core check.
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const axeSource = require("axe-core").source;

/** Screenshots go under console/e2e/out/<test>/<page>.png (git-ignored). */
export const outRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "out");

/** Starts headless chromium (CHROMIUM overrides /usr/bin/chromium). */
export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
}

/**
 * A fresh context and page for test t, closed when t ends. The page records
 * uncaught errors, console errors (CSP violations among them) and
 * subresources or fetches that failed (status >= 400) in page.errors;
 * screenshots of it are named after t.
 * @param {import("playwright-core").Browser} browser
 * @param {import("node:test").TestContext} t
 * @param {import("playwright-core").BrowserContextOptions} [opts]
 */
export async function newPage(browser, t, opts = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...opts });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  /** @type {string[]} */
  const errors = [];
  page.on("pageerror", (err) => errors.push(`uncaught: ${err.message}`));
  page.on("console", (msg) => {
    // A failed load is logged too: the response handler below judges those.
    if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) errors.push(`console: ${msg.text()}`);
  });
  page.on("response", (res) => {
    const kind = res.request().resourceType();
    if (res.status() >= 400 && ["script", "stylesheet", "font", "image", "fetch", "xhr", "eventsource"].includes(kind)) {
      errors.push(`${kind} ${res.url()} answered ${res.status()}`);
    }
  });
  Object.assign(page, { errors, testName: t.fullName ?? t.name });
  t.after(() => context.close());
  return page;
}

/**
 * Signs in with credential through the sign-in page: /login, or /dev/login
 * where /login is not served (404). Returns the response to the form's post
 * after its redirects.
 * @param {import("playwright-core").Page} page @param {string} baseURL @param {string} credential
 */
export async function signIn(page, baseURL, credential) {
  const res = await page.goto(baseURL + "/login");
  if (res?.status() === 404) await page.goto(baseURL + "/dev/login");
  const field = page.locator('input[name="credential"]');
  await field.fill(credential);
  const [nav] = await Promise.all([page.waitForNavigation(), field.press("Enter")]);
  return nav;
}

/** The session cookie of the page's context, if it has one. */
export async function sessionCookie(page) {
  return (await page.context().cookies()).find((c) => c.name === "helmr_session");
}

/**
 * Saves a full-page PNG of page as out/<test>/<name>.png and returns its
 * path.
 * @param {import("playwright-core").Page} page @param {string} name
 */
export async function screenshot(page, name) {
  const dir = path.join(outRoot, slug(page.testName ?? "untitled"));
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${slug(name)}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/**
 * Runs axe-core on the page (its source evaluated in the page: the CSP
 * refuses an injected script tag) and fails on serious or critical
 * violations, naming each rule and the first nodes it hit. Returns all
 * violations.
 * @param {import("playwright-core").Page} page
 */
export async function checkA11y(page) {
  const injected = await page.evaluate(() => typeof window.axe === "object");
  if (!injected) await page.evaluate(axeSource);
  const results = await page.evaluate(() =>
    window.axe.run(document, { resultTypes: ["violations"], runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] } }),
  );
  const bad = results.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(
    bad.map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join("; ")})`),
    [],
    `axe-core found serious or critical violations on ${page.url()}`,
  );
  return results.violations;
}

/** Asserts the page logged no uncaught error and no console error (a CSP violation is one). */
export function assertNoPageErrors(page) {
  assert.deepEqual(page.errors, [], `errors on ${page.url()}`);
}

function slug(s) {
  return s.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 120) || "untitled";
}
