import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type { TaskContext, WaitResult } from "../../../sdk/typescript/src/index.js";
import { createContext } from "../src/context.js";

/** A worker stand-in: records requests and answers from a table. */
function fakeWorker(answers: Record<string, unknown>) {
  const requests: Array<{ method: string; params?: unknown }> = [];
  const request = (method: string, params?: unknown) => {
    requests.push({ method, params });
    if (!(method in answers)) return Promise.reject(new Error(`no answer for ${method}`));
    return Promise.resolve(answers[method]);
  };
  return { requests, request };
}

describe("context", () => {
  // Compile-time: the adapter's ctx must satisfy the SDK's TaskContext.
  const bare: TaskContext = createContext({ id: "run_1", taskId: "t" });

  it("carries the run", () => {
    assert.deepStrictEqual(bare.run, { id: "run_1", taskId: "t" });
  });

  it("rejects waits without a worker instead of resolving", async () => {
    await assert.rejects(bare.wait.for({ seconds: 1 }), /needs the Helmr worker/);
  });

  it("sends ctx.wait.human and returns the typed result", async () => {
    const w = fakeWorker({ "wait.human": { ok: true, data: { approved: true } } });
    const ctx: TaskContext = createContext({ id: "run_1", taskId: "t" }, w.request);
    const r: WaitResult<{ approved: boolean }> = await ctx.wait.human<{ approved: boolean }>({
      displayText: "Ship it?",
      timeout: { minutes: 2 },
      schema: { type: "object" },
    });
    assert.deepStrictEqual(r, { ok: true, data: { approved: true } });
    assert.ok(r.ok && r.data.approved);
    assert.deepStrictEqual(w.requests, [
      { method: "wait.human", params: { displayText: "Ship it?", timeoutSeconds: 120, schema: { type: "object" } } },
    ]);
  });

  const outcomes: Array<[string, unknown, unknown]> = [
    ["a timeout", { ok: false, timedOut: true }, { ok: false, timedOut: true }],
    ["a cancel with a reason", { ok: false, canceled: true, reason: "no" }, { ok: false, canceled: true, reason: "no" }],
    ["a cancel", { ok: false, canceled: true }, { ok: false, canceled: true }],
  ];
  for (const [what, answer, want] of outcomes) {
    it(`ctx.wait.forToken reports ${what}`, async () => {
      const w = fakeWorker({ "wait.forToken": answer });
      const ctx = createContext({ id: "run_1", taskId: "t" }, w.request);
      assert.deepStrictEqual(await ctx.wait.forToken({ id: "wp_1" }, { timeout: { seconds: 5 } }), want);
      assert.deepStrictEqual(w.requests, [{ method: "wait.forToken", params: { token: "wp_1", timeoutSeconds: 5 } }]);
    });
  }

  it("refuses a malformed answer", async () => {
    const ctx = createContext({ id: "run_1", taskId: "t" }, fakeWorker({ "wait.forToken": { ok: "yes" } }).request);
    await assert.rejects(ctx.wait.forToken("wp_1"), /malformed answer from the worker/);
  });

  it("creates tokens and timers", async () => {
    const w = fakeWorker({ "wait.createToken": { id: "wp_2", url: "http://cp/v1/tokens/wp_2/callback/s" }, "wait.for": null, "wait.until": null });
    const ctx = createContext({ id: "run_1", taskId: "t" }, w.request);
    assert.deepStrictEqual(await ctx.wait.createToken({ idempotencyKey: "k", tags: ["a"], timeout: { hours: 1 } }), {
      id: "wp_2",
      url: "http://cp/v1/tokens/wp_2/callback/s",
    });
    await ctx.wait.for({ seconds: 1.5 });
    await ctx.wait.until(new Date("2030-01-01T00:00:00Z"));
    assert.deepStrictEqual(w.requests, [
      { method: "wait.createToken", params: { timeoutSeconds: 3600, idempotencyKey: "k", tags: ["a"] } },
      { method: "wait.for", params: { seconds: 1.5 } },
      { method: "wait.until", params: { until: "2030-01-01T00:00:00.000Z" } },
    ]);
  });

  const bad: Array<[string, (ctx: TaskContext) => Promise<unknown>, RegExp]> = [
    ["an empty displayText", (c) => c.wait.human({ displayText: " " }), /displayText must be a non-empty string/],
    ["two units", (c) => c.wait.for({ seconds: 1, minutes: 1 } as never), /exactly one of seconds, minutes or hours/],
    ["a negative duration", (c) => c.wait.for({ seconds: -1 }), /finite number >= 0/],
    ["an invalid date", (c) => c.wait.until(new Date("nope")), /valid Date/],
    ["no token", (c) => c.wait.forToken(""), /token must be a token id/],
  ];
  for (const [what, call, want] of bad) {
    it(`rejects ${what} before asking the worker`, async () => {
      const w = fakeWorker({});
      await assert.rejects(call(createContext({ id: "run_1", taskId: "t" }, w.request)), want);
      assert.equal(w.requests.length, 0);
    });
  }
});
