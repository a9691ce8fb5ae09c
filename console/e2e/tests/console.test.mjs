// The console's Done-when (issue 16) in a browser, against one real helmr
// dev with the fixture project deployed: live runs list and run page (and
// its resumption after a dropped connection), approvals, the test page and
// replay, a workspace's files and terminal, secrets, API keys and what a
// key without runs:manage sees, XSS payloads, the sign-in redirect, and the
// accessibility check on every page.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import http from "node:http";
import { after, before, test } from "node:test";

import { assertNoPageErrors, checkA11y, launch, newPage, screenshot, signIn } from "../lib/browser.mjs";
import { startDev } from "../lib/dev.mjs";

const project = "console-e2e";
const scope = `project=${project}&env=dev`;
const script = "<script>window.__xss=1</script>";
const img = `<img src=x onerror="window.__xss=1">`;

/** @type {import("../lib/dev.mjs").Dev} */
let dev;
/** @type {import("playwright-core").Browser} */
let browser;
/** A run left WAITING for the read-only key's view; a workspace with files. */
let waitingRun, workspace;

before(async () => {
  dev = await startDev();
  browser = await launch();
  await dev.deploy("console/e2e/fixtures/console-e2e");
  waitingRun = await dev.trigger(project, "approval", { question: "Left waiting: ship it?" });
  workspace = await dev.api("POST", `/v1/workspaces?${scope}`, { sandbox: "console-e2e" });
  const made = await dev.api("POST", `/v1/workspaces/${workspace.id}/exec`, {
    command: "mkdir -p docs && printf 'hello from the workspace\\n<b>not bold</b>\\n' > docs/readme.txt && echo made",
  });
  assert.equal(made.exitCode, 0, `making the workspace's files: ${JSON.stringify(made)}`);
  await dev.waitRun(waitingRun.id, (r) => r.status === "WAITING");
});
after(async () => {
  await browser?.close();
  await dev?.stop();
});

/** A signed-in page for t (as the owner unless credential says otherwise). */
async function signedIn(t, opts, credential = dev.token) {
  const page = await newPage(browser, t, opts);
  await signIn(page, dev.url, credential);
  return page;
}

/** Screenshots the page as name and runs the accessibility check on it. */
async function check(page, name) {
  await screenshot(page, name);
  await checkA11y(page);
}

/** The runs list's row of run id. */
function row(page, id) {
  return page.locator("table.runs tbody tr").filter({ has: page.getByRole("link", { name: id }) });
}

/** The tick numbers in the run page's logs, in order. */
async function ticks(page) {
  const text = await page.locator("#logs").innerText();
  return text
    .split("\n")
    .map((l) => /^tick (\d+)$/.exec(l.trim()))
    .filter(Boolean)
    .map((m) => Number(m[1]));
}

/**
 * A proxy to target on a free loopback port: it records the event streams
 * requested through it (url, Last-Event-ID) and cut() drops the open ones
 * mid-stream, returning how many it dropped.
 * @param {string} target
 */
async function cuttingProxy(target) {
  /** @type {{url: string, lastEventId?: string}[]} */
  const streams = [];
  /** @type {Set<import("node:net").Socket>} */
  const open = new Set();
  const server = http.createServer((req, res) => {
    const sse = /\/events\/stream/.test(req.url ?? "");
    if (sse) streams.push({ url: req.url ?? "", lastEventId: req.headers["last-event-id"] });
    const up = http.request(target + req.url, { method: req.method, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
    if (sse) {
      open.add(req.socket);
      res.on("close", () => open.delete(req.socket));
    }
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = /** @type {import("node:net").AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${port}`,
    streams,
    cut() {
      const n = open.size;
      for (const s of open) s.destroy();
      open.clear();
      return n;
    },
    close: () => {
      server.closeAllConnections();
      return new Promise((ok) => server.close(ok));
    },
  };
}

test("a run started with the CLI appears in the runs list live, and its state changes", async (t) => {
  const page = await signedIn(t);
  await page.goto(`${dev.url}/runs?${scope}`);
  await page.locator("table.runs tbody[data-live]").waitFor({ state: "attached" });
  await page.evaluate(() => {
    window.__notReloaded = true;
  });

  const run = await dev.trigger(project, "ticker", { n: 16, everyMs: 500 }); // running for longer than a refresh
  await row(page, run.id).waitFor();
  await row(page, run.id).filter({ hasText: /QUEUED|STARTING|RUNNING/ }).waitFor();
  await check(page, "runs-live-running");
  await row(page, run.id).filter({ hasText: "COMPLETED" }).waitFor({ timeout: 60_000 });
  assert.equal(await page.evaluate(() => window.__notReloaded), true, "the runs list reloaded to show the run");
  await check(page, "runs-live-completed");
  assertNoPageErrors(page);
});

test("the run page follows logs live and resumes after dropped connections without loss or repeats", async (t) => {
  const page = await signedIn(t);
  // Every EventSource the page opens is kept, so that the test can drop
  // the connection the way the browser sees a failed one: closed, then an
  // error event.
  await page.addInitScript(() => {
    const ES = window.EventSource;
    window.__sources = [];
    window.EventSource = class extends ES {
      constructor(url, init) {
        super(url, init);
        window.__sources.push(this);
      }
    };
    window.__drop = () => {
      let n = 0;
      for (const es of window.__sources) {
        if (es.readyState === ES.CLOSED) continue;
        es.close();
        es.dispatchEvent(new Event("error"));
        n++;
      }
      return n;
    };
  });
  /** @type {string[]} */
  const streams = [];
  page.on("request", (req) => {
    if (/\/events\/stream/.test(req.url())) streams.push(req.url());
  });

  // The page goes through a proxy that can cut its event streams the way
  // a dropped connection does (the cookie is the host's, on any port).
  const proxy = await cuttingProxy(dev.url);
  t.after(() => proxy.close());
  const n = 40;
  const run = await dev.trigger(project, "ticker", { n, everyMs: 250 });
  await page.goto(`${proxy.url}/runs/${run.id}?${scope}`);
  await page.locator("#logs").filter({ hasText: "tick 3" }).waitFor({ timeout: 60_000 });
  await page.locator("#timeline-state").filter({ hasText: "Live." }).waitFor();
  await check(page, "run-live");

  // Drop 1: the connection breaks mid-stream; the browser reconnects by
  // itself, sending Last-Event-ID.
  const seen = (await ticks(page)).at(-1);
  const opened = proxy.streams.length;
  assert.ok(proxy.cut() >= 1, "no event stream through the proxy to cut");
  await page.locator("#logs").filter({ hasText: `tick ${seen + 3}` }).waitFor({ timeout: 60_000 });
  const again = proxy.streams.slice(opened);
  assert.ok(again.length >= 1, "the browser did not reconnect after the server side cut the stream");
  assert.ok(Number(again[0].lastEventId) > 0, `the browser's reconnect sent Last-Event-ID ${again[0].lastEventId}`);
  // Drop 2: the connection fails outright; stream.js reopens it after
  // the last seq it delivered.
  const seq = (u) => Number(new URL(u).searchParams.get("after") ?? 0);
  const before = streams.length;
  const firstAfter = seq(streams[0]);
  assert.ok((await page.evaluate(() => window.__drop())) >= 1, "no open event stream to drop");

  await page.locator("#timeline-state").filter({ hasText: "The run has finished." }).waitFor({ timeout: 90_000 });
  assert.ok(streams.length > before, `the run page did not reconnect after the drop (stream requests: ${streams.join(", ")})`);
  assert.ok(seq(streams[before]) > firstAfter, `the reconnect ${streams[before]} did not resume after what the page had (first: ${streams[0]})`);
  assert.deepEqual(await ticks(page), Array.from({ length: n }, (_, i) => i + 1), "the logs lost or repeated lines");
  assert.equal(await page.locator("#log-count").innerText(), String((await page.locator("#logs").innerText()).trimEnd().split("\n").length));
  await page.locator("#run-status").filter({ hasText: "COMPLETED" }).waitFor();
  await check(page, "run-finished");
  assertNoPageErrors(page);
});

test("approve a waiting run through its schema form; a missing required field is refused first", async (t) => {
  const run = await dev.trigger(project, "approval", { question: "Approve: ship it?" });
  await dev.waitRun(run.id, (r) => r.status === "WAITING");
  const page = await signedIn(t);
  /** @type {string[]} */
  const answers = [];
  page.on("request", (req) => {
    if (req.method() === "POST" && /\/approve$/.test(req.url())) answers.push(req.postData() ?? "");
  });
  await page.goto(`${dev.url}/runs/${run.id}?${scope}`);
  const form = page.locator("form.approve");
  await page.locator("article.wait p.display").filter({ hasText: "Approve: ship it?" }).waitFor();
  await form.locator('[name="note"]').waitFor();
  await check(page, "approval-form");

  // The note is required and empty: nothing is sent, and the field says so.
  await form.getByRole("button", { name: "Approve" }).click();
  await form.getByText(/note is required/).waitFor();
  assert.equal(await form.locator('[name="note"]').getAttribute("aria-invalid"), "true");
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("name")), "note", "the bad field is not focused");
  assert.deepEqual(answers, [], "the form sent an answer with a required field missing");
  await check(page, "approval-refused");

  await form.locator('[name="ship"]').check();
  await form.locator('[name="env"]').selectOption({ label: "production" });
  await form.locator('[name="note"]').fill("looks good");
  await form.locator('[name="replicas"]').fill("3");
  await Promise.all([page.waitForEvent("load"), form.getByRole("button", { name: "Approve" }).click()]);
  assert.equal(answers.length, 1);
  assert.deepEqual(JSON.parse(answers[0]), { data: { ship: true, env: "production", note: "looks good", replicas: 3 } });

  await page.locator("#run-status").filter({ hasText: "COMPLETED" }).waitFor({ timeout: 60_000 });
  const done = await dev.waitRun(run.id, (r) => r.status === "COMPLETED");
  assert.equal(done.output.ok, true, `the run's answer: ${JSON.stringify(done.output)}`);
  assert.deepEqual(done.output.data, { ship: true, env: "production", note: "looks good", replicas: 3 });
  await page.reload();
  await page.locator("#logs").filter({ hasText: "approved" }).waitFor();
  await check(page, "approval-completed");
  assertNoPageErrors(page);
});

test("reject a waiting run with a reason from the approvals inbox; the run ends with it", async (t) => {
  const run = await dev.trigger(project, "approval", { question: "Reject: ship it?" });
  await dev.waitRun(run.id, (r) => r.status === "WAITING");
  const page = await signedIn(t);
  await page.goto(`${dev.url}/approvals?${scope}`);
  const art = page.locator("article.wait").filter({ hasText: "Reject: ship it?" });
  await art.waitFor();
  await check(page, "approvals");
  const reason = "not this week <b>really</b>";
  await art.locator('form.reject [name="reason"]').fill(reason);
  await Promise.all([page.waitForEvent("load"), art.getByRole("button", { name: "Reject" }).click()]);
  await page.locator("article.wait").filter({ hasText: "Reject: ship it?" }).waitFor({ state: "detached" });

  const done = await dev.waitRun(run.id, (r) => ["COMPLETED", "FAILED"].includes(r.status));
  assert.equal(done.output?.ok, false, `the rejected run's answer: ${JSON.stringify(done)}`);
  assert.equal(done.output.reason, reason);
  await page.goto(`${dev.url}/runs/${run.id}?${scope}`);
  await page.locator("#logs").filter({ hasText: "not approved" }).waitFor();
  await page.getByText(reason).first().waitFor();
  await check(page, "rejected-run");
  assertNoPageErrors(page);
});

test("the test page triggers a run and lands on it; replay with an edited payload links to the original", async (t) => {
  const page = await signedIn(t);
  await page.goto(`${dev.url}/test?${scope}`);
  await page.locator('select[name="task"]').selectOption("echo");
  await Promise.all([page.waitForURL(/task=echo/), page.getByRole("button", { name: "Open" }).click()]);
  const box = page.locator("#payload");
  await box.fill("{not json");
  await page.locator("#payload-error").filter({ hasText: /Not valid JSON/ }).waitFor();
  await check(page, "test-invalid");
  await page.getByRole("button", { name: "Trigger" }).click();
  assert.match(page.url(), /\/test\?/, "an invalid payload was sent");

  await box.fill(JSON.stringify({ lines: ["from the test page"] }));
  await Promise.all([page.waitForURL(/\/runs\/run_/), page.getByRole("button", { name: "Trigger" }).click()]);
  const first = /\/runs\/([^?]+)/.exec(page.url())[1];
  await page.locator("#run-status").filter({ hasText: "COMPLETED" }).waitFor({ timeout: 60_000 });
  await page.locator("#logs").filter({ hasText: "from the test page" }).waitFor();
  await check(page, "test-run");

  await page.reload();
  await page.locator("details.replay summary").click();
  const replay = page.locator("#replay-payload");
  assert.deepEqual(JSON.parse(await replay.inputValue()), { lines: ["from the test page"] }, "replay does not offer the run's payload");
  await replay.fill(JSON.stringify({ lines: ["replayed, edited"] }));
  await Promise.all([page.waitForURL((u) => /\/runs\/run_/.test(u.pathname) && !u.pathname.endsWith(first)), page.getByRole("button", { name: "Run again" }).click()]);
  const second = /\/runs\/([^?]+)/.exec(page.url())[1];
  assert.notEqual(second, first);
  const link = page.locator("dl.facts a").filter({ hasText: first });
  assert.match((await link.getAttribute("href")) ?? "", new RegExp(`/runs/${first}\\b`));
  await page.locator("#logs").filter({ hasText: "replayed, edited" }).waitFor({ timeout: 60_000 });
  const r = await dev.api("GET", `/v1/runs/${second}`);
  assert.equal(r.replayOf, first);
  assert.deepEqual(r.payload, { lines: ["replayed, edited"] });
  await check(page, "replay");

  // The test page offers the payloads it was given again.
  await page.goto(`${dev.url}/test?${scope}&task=echo`);
  await page.locator("ul.recent").getByText("from the test page").first().waitFor();
  await page.locator("ul.recent li").filter({ hasText: "from the test page" }).first().getByRole("button", { name: "Use this payload" }).click();
  assert.deepEqual(JSON.parse(await page.locator("#payload").inputValue()), { lines: ["from the test page"] });
  assertNoPageErrors(page);
});

test("tokens: complete one with JSON (bad JSON refused first) and cancel another; cancel a run from its page", async (t) => {
  const done = await dev.api("POST", `/v1/tokens?${scope}`, { tags: ["e2e-complete"] });
  const dropped = await dev.api("POST", `/v1/tokens?${scope}`, { tags: ["e2e-cancel"] });
  const page = await signedIn(t);
  page.on("dialog", (d) => d.accept());
  await page.goto(`${dev.url}/tokens?${scope}&kind=token`);
  const first = page.locator(`tr[data-token="${done.id}"]`);
  await first.locator('textarea[name="data"]').fill("{oops");
  await first.getByRole("button", { name: "Complete" }).click();
  await page.locator("#action-msg").filter({ hasText: /not valid JSON/ }).waitFor();
  assert.equal((await dev.api("GET", `/v1/tokens/${done.id}`)).status, "WAITING", "bad JSON completed the token");
  await check(page, "tokens");
  await first.locator('textarea[name="data"]').fill('{"ok": "<b>yes</b>"}');
  await Promise.all([page.waitForEvent("load"), first.getByRole("button", { name: "Complete" }).click()]);
  await page.locator(`tr[data-token="${done.id}"]`).getByText("COMPLETED").waitFor();
  const second = page.locator(`tr[data-token="${dropped.id}"]`);
  await second.locator('input[name="reason"]').fill("no longer needed");
  await Promise.all([page.waitForEvent("load"), second.getByRole("button", { name: "Cancel" }).click()]);
  await page.locator(`tr[data-token="${dropped.id}"]`).getByText("CANCELED").waitFor();
  assert.deepEqual((await dev.api("GET", `/v1/tokens/${done.id}`)).data, { ok: "<b>yes</b>" });
  assert.equal((await dev.api("GET", `/v1/tokens/${dropped.id}`)).reason, "no longer needed");
  await check(page, "tokens-answered");

  const run = await dev.trigger(project, "ticker", { n: 200, everyMs: 500 });
  await page.goto(`${dev.url}/runs/${run.id}?${scope}`);
  await page.locator("#logs").filter({ hasText: "tick 1" }).waitFor({ timeout: 60_000 });
  await Promise.all([page.waitForEvent("load"), page.getByRole("button", { name: "Cancel run" }).click()]);
  await page.locator("#run-status").filter({ hasText: "CANCELED" }).waitFor({ timeout: 30_000 });
  assert.equal((await dev.waitRun(run.id, (r) => r.status === "CANCELED")).status, "CANCELED");
  assert.equal(await page.locator("#cancel").count(), 0, "a canceled run still offers cancel");
  await check(page, "canceled-run");
  assertNoPageErrors(page);
});

test("session streams: input sent from the run page, output records arrive live", async (t) => {
  const run = await dev.trigger(project, "chat", {});
  await dev.waitRun(run.id, (r) => r.status === "RUNNING");
  const page = await signedIn(t);
  await page.goto(`${dev.url}/runs/${run.id}?${scope}`);
  const box = page.locator("#session-data");
  const out = page.locator("#session-output");
  await box.fill(`{"text": "${img.replaceAll('"', '\\"')}"}`);
  await page.locator("#session-input").getByRole("button", { name: "Send" }).click();
  await page.locator("#action-msg").filter({ hasText: "Input sent." }).waitFor();
  assert.equal(await box.inputValue(), "", "the input box kept what was sent");
  await out.locator("li").filter({ hasText: `{"echo":{"text":"<img src=x onerror=\\"window.__xss=1\\">"}}` }).waitFor({ timeout: 30_000 });
  assert.equal(await out.locator("img").count(), 0, "an output record became markup");
  await box.fill("plain words");
  await page.locator("#session-input").getByRole("button", { name: "Send" }).click();
  await out.locator("li").filter({ hasText: '{"echo":"plain words"}' }).waitFor({ timeout: 30_000 });
  await check(page, "session");
  await box.fill("bye");
  await page.locator("#session-input").getByRole("button", { name: "Send" }).click();
  await page.locator("#run-status").filter({ hasText: "COMPLETED" }).waitFor({ timeout: 30_000 });
  const done = await dev.waitRun(run.id, (r) => r.status === "COMPLETED");
  assert.deepEqual(done.output, { answered: 2 });
  await page.reload();
  await page.locator("#session-output li").nth(1).waitFor();
  assert.equal(await page.locator("#session-output li").count(), 2, "the finished run's records are not shown once each");
  await page.locator("section").filter({ has: page.getByRole("heading", { name: "Metadata" }) }).getByText("answered").waitFor();
  await check(page, "session-finished");
  assertNoPageErrors(page);
});

test("a workspace: browse, view a text file, upload a file and download it", async (t) => {
  const page = await signedIn(t);
  await page.goto(`${dev.url}/workspaces?${scope}`);
  await check(page, "workspaces");
  await Promise.all([page.waitForURL(/\/workspaces\/ws_/), page.getByRole("link", { name: workspace.id }).click()]);
  await Promise.all([page.waitForURL(/path=docs/), page.getByRole("link", { name: "docs/" }).click()]);
  await Promise.all([page.waitForURL(/file=docs/), page.getByRole("link", { name: "readme.txt", exact: true }).click()]);
  const view = page.locator("#file-view pre");
  await view.waitFor();
  assert.equal((await view.innerText()).trimEnd(), "hello from the workspace\n<b>not bold</b>");
  assert.equal(await page.locator("#file-view b").count(), 0, "the file's markup became elements");
  await check(page, "workspace-file");

  const bytes = Buffer.concat([Buffer.from("upload\u0000"), randomBytes(3000)]);
  await page.locator('#upload-form input[type="file"]').setInputFiles({ name: "blob.bin", mimeType: "application/octet-stream", buffer: bytes });
  await Promise.all([page.waitForEvent("load"), page.locator("#upload-form").getByRole("button", { name: "Upload", exact: true }).click()]);
  const entry = page.locator("table.files tr").filter({ hasText: "blob.bin" });
  await entry.waitFor();
  assert.match(await entry.innerText(), /3007/);
  const [download] = await Promise.all([page.waitForEvent("download"), entry.getByRole("link", { name: /Download/ }).click()]);
  assert.equal(download.suggestedFilename(), "blob.bin");
  const got = await readFile(await download.path());
  assert.ok(got.equals(bytes), `downloaded ${got.length} bytes that differ from the ${bytes.length} uploaded`);
  await check(page, "workspace-uploaded");
  assertNoPageErrors(page);
});

test("a workspace's terminal runs echo hi", async (t) => {
  const page = await signedIn(t);
  await page.goto(`${dev.url}/workspaces/${workspace.id}?${scope}`);
  await page.getByRole("button", { name: "Open a terminal" }).click();
  const screen = page.locator("#terminal .xterm-rows");
  await screen.waitFor();
  await page.locator("#terminal .xterm-helper-textarea").focus();
  // The prompt first: what is typed before the shell reads is echoed anyway, but wait to be sure it runs.
  await screen.filter({ hasText: /[$#]/ }).waitFor({ timeout: 60_000 });
  await page.keyboard.type("echo hi-$((40+2))");
  await page.keyboard.press("Enter");
  await screen.filter({ hasText: "hi-42" }).waitFor({ timeout: 30_000 });
  await check(page, "terminal");
  await page.getByRole("button", { name: "Close the terminal" }).click();
  assertNoPageErrors(page);
});

test("a secret's value is set and never seen again", async (t) => {
  const page = await signedIn(t);
  const value = `sv-${randomBytes(12).toString("hex")}`;
  /** @type {Promise<string>[]} */
  const bodies = [];
  page.on("response", (res) => {
    if (res.request().resourceType() !== "eventsource") bodies.push(res.text().catch(() => ""));
  });
  await page.goto(`${dev.url}/secrets?${scope}`);
  const form = page.locator("#secret-form");
  await form.locator('[name="name"]').fill("E2E_TOKEN");
  await form.locator('[name="value"]').fill(value);
  await Promise.all([page.waitForEvent("load"), form.getByRole("button", { name: "Set" }).click()]);
  await page.locator("#secrets td code").filter({ hasText: "E2E_TOKEN" }).waitFor();
  assert.equal(await form.locator('[name="value"]').inputValue(), "");
  await check(page, "secrets");

  // A run bound to it on the test page prints and returns it.
  await page.goto(`${dev.url}/test?${scope}&task=leak`);
  assert.equal(await page.locator('input[data-secret="E2E_TOKEN"]').inputValue(), "E2E_TOKEN", "the test page does not bind the declared secret");
  await Promise.all([page.waitForURL(/\/runs\/run_/), page.getByRole("button", { name: "Trigger" }).click()]);
  const runPath = new URL(page.url()).pathname + new URL(page.url()).search;
  const runID = runPath.split("/")[2].split("?")[0];
  const leaked = await dev.waitRun(runID, (r) => ["COMPLETED", "FAILED"].includes(r.status));
  assert.equal(leaked.status, "COMPLETED", `the run bound to the secret: ${JSON.stringify(leaked)}`);
  assert.deepEqual(leaked.secrets, { E2E_TOKEN: "vault:E2E_TOKEN" });

  for (const p of [`/secrets?${scope}`, `/test?${scope}&task=echo`, `/runs?${scope}`, runPath]) {
    await page.goto(dev.url + p);
    assert.ok(!(await page.content()).includes(value), `${p} shows the secret's value`);
  }
  await page.locator("#logs").filter({ hasText: "the token is [redacted:E2E_TOKEN]" }).waitFor();
  assert.ok(!(await page.locator("#logs").innerText()).includes(value), "the run's log shows the secret's value");
  await check(page, "secret-run");
  const seen = await Promise.all(bodies);
  assert.ok(seen.length > 3, "no responses observed");
  assert.deepEqual(seen.filter((b) => b.includes(value)).map((b) => b.slice(0, 200)), [], "a response carried the secret's value");
  const listed = await dev.api("GET", `/v1/secrets?${scope}`);
  assert.ok(!JSON.stringify(listed).includes(value));
  assert.equal(listed.secrets.find((m) => m.name === "E2E_TOKEN")?.mode, "sandbox");

  // Bound for egress through the form: the table says where the value goes.
  await page.goto(`${dev.url}/secrets?${scope}`);
  await form.locator('[name="name"]').fill("E2E_EGRESS");
  await form.locator('[name="value"]').fill(`ghp_${randomBytes(18).toString("hex")}`);
  await form.locator('[name="hosts"]').fill("api.example.test, *.example.test");
  await Promise.all([page.waitForEvent("load"), form.getByRole("button", { name: "Set" }).click()]);
  const row = page.locator("#secrets tr").filter({ hasText: "E2E_EGRESS" });
  await row.filter({ hasText: "egress-bound" }).waitFor();
  assert.match(await row.innerText(), /\*\.example\.test, api\.example\.test/);
  assert.match(await page.locator("#secrets tr").filter({ hasText: "E2E_TOKEN" }).innerText(), /in the sandbox \(weaker/);
  const egress = (await dev.api("GET", `/v1/secrets?${scope}`)).secrets.find((m) => m.name === "E2E_EGRESS");
  assert.deepEqual([egress.mode, egress.egress], ["egress", { hosts: ["*.example.test", "api.example.test"] }]);
  await check(page, "secrets-egress");
  assertNoPageErrors(page);
});

test("API keys: created and shown once, revoked; a key without runs:manage sees no approve or cancel", async (t) => {
  const page = await signedIn(t);
  page.on("dialog", (d) => d.accept());
  await page.goto(`${dev.url}/apikeys?${scope}`);

  /** Creates a key through the form and returns it as shown. */
  const create = async (name, grants) => {
    const form = page.locator("#apikey-form");
    await form.locator('[name="name"]').fill(name);
    for (const g of grants) await form.locator(`input[name="grants"][value="${g}"]`).check();
    await form.getByRole("button", { name: "Create" }).click();
    const shown = page.locator("#apikey-value");
    await shown.filter({ hasText: /\S/ }).waitFor();
    return (await shown.innerText()).trim();
  };

  const reader = await create("e2e-reader", ["runs:read", "tasks:read", "tokens:read", "session-streams:read"]);
  await check(page, "apikey-created");
  await page.goto(`${dev.url}/apikeys?${scope}`);
  assert.ok(!(await page.content()).includes(reader), "the key is shown again");
  assert.ok(!(await page.locator("#apikey-value").isVisible()), "the created-key box is shown after a reload");

  const doomed = await create("e2e-doomed", ["runs:read"]);
  const { apiKeys: keys } = await dev.api("GET", "/v1/apikeys");
  const id = keys.find((k) => k.name === "e2e-doomed")?.id;
  assert.ok(id, `no key named e2e-doomed in ${JSON.stringify(keys)}`);
  await page.goto(`${dev.url}/apikeys?${scope}`);
  await page.locator(`[data-revoke-key="${id}"]`).click();
  await page.locator("tr").filter({ hasText: id }).getByText("revoked").waitFor();
  const res = await fetch(`${dev.url}/v1/auth/me`, { headers: { Authorization: `Bearer ${doomed}` } });
  assert.equal(res.status, 401, "a revoked key still works");
  await page.reload();
  await page.locator("tr").filter({ hasText: id }).getByText("revoked").waitFor();
  await check(page, "apikey-revoked");
  assertNoPageErrors(page);

  // Signed in as the reader: the waiting run shows its wait, no answer or cancel.
  const asKey = await signedIn(t, {}, reader);
  await asKey.goto(`${dev.url}/runs/${waitingRun.id}?${scope}`);
  await asKey.locator("article.wait").getByText("Left waiting: ship it?").waitFor();
  assert.equal(await asKey.locator("#cancel").count(), 0, "a key without runs:manage sees cancel");
  assert.equal(await asKey.locator("form.approve, form.reject").count(), 0, "a key without runs:manage sees approve or reject");
  assert.equal(await asKey.getByRole("button", { name: /approve|reject|cancel/i }).count(), 0);
  assert.equal(await asKey.locator("details.replay").count(), 0, "a key without runs:create sees replay");
  await check(asKey, "reader-waiting-run");
  await asKey.goto(`${dev.url}/approvals?${scope}`);
  await asKey.locator("article.wait").filter({ hasText: "Left waiting" }).waitFor();
  assert.equal(await asKey.getByRole("button", { name: /approve|reject/i }).count(), 0, "the inbox offers answers to a key without runs:manage");
  await check(asKey, "reader-approvals");
  assertNoPageErrors(asKey);
});

// The page runs with its CSP bypassed: only escaping keeps the payloads inert.
test("XSS payloads in a run's payload and logs stay text on the runs list and the run page", async (t) => {
  const run = await dev.trigger(project, "echo", { lines: [script, img], note: script + img });
  await dev.waitRun(run.id, (r) => r.status === "COMPLETED");
  const page = await signedIn(t, { bypassCSP: true });

  await page.goto(`${dev.url}/runs?${scope}`);
  await row(page, run.id).waitFor();
  await page.waitForTimeout(3500); // a live refresh of the rows
  assert.equal(await page.evaluate(() => window.__xss), undefined, "a payload ran on the runs list");

  await page.goto(`${dev.url}/runs/${run.id}?${scope}`);
  await page.locator("#logs").filter({ hasText: "window.__xss" }).waitFor({ timeout: 30_000 });
  const logs = await page.locator("#logs").innerText();
  assert.ok(logs.includes(script) && logs.includes(img), `the logs do not show the payloads as text: ${logs}`);
  const body = await page.locator("main").innerText();
  assert.ok(body.includes(JSON.stringify(script + img).slice(1, -1)) || body.includes(script + img), "the payload is not shown as text");
  assert.equal(await page.locator('main script:not([src^="/assets/"]), main img').count(), 0, "the payloads became elements");
  assert.equal(await page.evaluate(() => window.__xss), undefined, "a payload ran on the run page");
  await check(page, "xss-run");
});

test("signed out, /runs sends to sign-in and back to /runs after it", async (t) => {
  const page = await newPage(browser, t);
  await page.goto(`${dev.url}/runs?${scope}`);
  assert.match(new URL(page.url()).pathname, /^\/(dev\/)?login$/, `signed out, /runs went to ${page.url()}`);
  await check(page, "login");
  const field = page.locator('input[name="credential"]');
  await field.fill(dev.token);
  await Promise.all([page.waitForURL((u) => u.pathname === "/runs"), field.press("Enter")]);
  assert.equal(new URL(page.url()).search, `?${scope}`);
  await page.locator("table.runs").waitFor();
  assertNoPageErrors(page);
});

test("the keyboard: a skip link to the content, visible focus, a run opened and answered by keys", async (t) => {
  const run = await dev.trigger(project, "approval", { question: "Keyboard: ship it?" });
  await dev.waitRun(run.id, (r) => r.status === "WAITING");
  const page = await signedIn(t);
  await page.goto(`${dev.url}/runs?${scope}`);
  await page.keyboard.press("Tab");
  const skip = page.getByRole("link", { name: "Skip to content" });
  assert.equal(await skip.evaluate((e) => e === document.activeElement), true, "Tab does not reach the skip link first");
  const box = await skip.boundingBox();
  assert.ok(box && box.x >= 0 && box.y >= 0, `the focused skip link is off screen: ${JSON.stringify(box)}`);
  assert.notEqual(await skip.evaluate((e) => getComputedStyle(e).outlineStyle), "none", "the focused skip link has no outline");
  await page.keyboard.press("Enter");
  assert.match(page.url(), /#main$/);
  await screenshot(page, "skip-link");

  // To the run's link by Tab, opened with Enter.
  const link = page.getByRole("link", { name: run.id });
  for (let i = 0; i < 40 && !(await link.evaluate((e) => e === document.activeElement)); i++) await page.keyboard.press("Tab");
  assert.equal(await link.evaluate((e) => e === document.activeElement), true, "Tab never reached the run's link");
  await Promise.all([page.waitForURL(new RegExp(`/runs/${run.id}`)), page.keyboard.press("Enter")]);

  // The approval form by keys alone: Space checks, arrows choose, typing fills, Enter submits.
  const form = page.locator("form.approve");
  await form.locator('[name="ship"]').waitFor();
  await form.locator('[name="ship"]').focus();
  await page.keyboard.press("Space");
  await page.keyboard.press("Tab");
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("Tab");
  await page.keyboard.type("by keyboard");
  await page.keyboard.press("Tab");
  await page.keyboard.type("2");
  await Promise.all([page.waitForEvent("load"), page.keyboard.press("Enter")]);
  const done = await dev.waitRun(run.id, (r) => r.status === "COMPLETED");
  assert.deepEqual(done.output.data, { ship: true, env: "production", note: "by keyboard", replicas: 2 });
  assertNoPageErrors(page);
});

test("every console page passes the accessibility check", async (t) => {
  const page = await signedIn(t);
  const { deployments } = await dev.api("GET", `/v1/deployments?${scope}`);
  const pages = {
    runs: `/runs?${scope}`,
    run: `/runs/${waitingRun.id}?${scope}`,
    approvals: `/approvals?${scope}`,
    tokens: `/tokens?${scope}`,
    test: `/test?${scope}&task=approval`,
    deployments: `/deployments?${scope}`,
    deployment: `/deployments/${deployments[0].id}?${scope}`,
    workspaces: `/workspaces?${scope}`,
    workspace: `/workspaces/${workspace.id}?${scope}`,
    secrets: `/secrets?${scope}`,
    apikeys: `/apikeys?${scope}`,
    workers: `/workers?${scope}`,
  };
  for (const [name, p] of Object.entries(pages)) {
    const res = await page.goto(dev.url + p);
    assert.equal(res?.status(), 200, `${p} answered ${res?.status()}`);
    await check(page, name);
  }
  assertNoPageErrors(page);
});
