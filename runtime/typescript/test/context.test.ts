import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { WaitError, WaitRejectedError, WaitTimeoutError, type TaskContext, type WaitResult } from "../../../sdk/typescript/src/index.js";
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

  it("sends ctx.wait.human and resolves with the answer itself", async () => {
    const w = fakeWorker({ "wait.human": { ok: true, data: { approved: true } } });
    const ctx: TaskContext = createContext({ id: "run_1", taskId: "t" }, w.request);
    const decision: { approved: boolean } = await ctx.wait.human<{ approved: boolean }>({
      displayText: "Ship it?",
      timeout: { minutes: 2 },
      schema: { type: "object" },
    });
    assert.deepStrictEqual(decision, { approved: true });
    assert.deepStrictEqual(w.requests, [
      { method: "wait.human", params: { displayText: "Ship it?", timeoutSeconds: 120, schema: { type: "object" } } },
    ]);
  });

  it("sends ctx.wait.human.result the same request and resolves with the typed result", async () => {
    const w = fakeWorker({ "wait.human": { ok: true, data: { approved: true } } });
    const ctx: TaskContext = createContext({ id: "run_1", taskId: "t" }, w.request);
    const r: WaitResult<{ approved: boolean }> = await ctx.wait.human.result<{ approved: boolean }>({ displayText: "Ship it?", timeout: { minutes: 2 } });
    assert.deepStrictEqual(r, { ok: true, data: { approved: true } });
    assert.ok(r.ok && r.data.approved);
    assert.deepStrictEqual(w.requests, [{ method: "wait.human", params: { displayText: "Ship it?", timeoutSeconds: 120 } }]);
  });

  // What ctx.wait.human throws, checked with the SDK's classes: another copy
  // than the adapter's, as in a deployed bundle.
  const thrown: Array<[string, unknown, { cls: typeof WaitTimeoutError | typeof WaitRejectedError; name: string; message: string; reason?: string }]> = [
    ["a timeout", { ok: false, timedOut: true }, { cls: WaitTimeoutError, name: "WaitTimeoutError", message: 'human wait "Ship it?" timed out after 120s' }],
    ["a rejection", { ok: false, canceled: true, reason: "not now" }, { cls: WaitRejectedError, name: "WaitRejectedError", message: 'human wait "Ship it?" was rejected: not now', reason: "not now" }],
    ["a rejection without a reason", { ok: false, canceled: true }, { cls: WaitRejectedError, name: "WaitRejectedError", message: 'human wait "Ship it?" was rejected' }],
    ["a rejection with the default reason", { ok: false, canceled: true, reason: "rejected" }, { cls: WaitRejectedError, name: "WaitRejectedError", message: 'human wait "Ship it?" was rejected', reason: "rejected" }],
  ];
  for (const [what, answer, want] of thrown) {
    it(`throws ${what} from ctx.wait.human, and reports it from human.result`, async () => {
      const ctx = createContext({ id: "run_1", taskId: "t" }, fakeWorker({ "wait.human": answer }).request);
      const err = await ctx.wait.human({ displayText: "Ship it?", timeout: { minutes: 2 } }).then(
        (v) => assert.fail(`resolved with ${JSON.stringify(v)}`),
        (e: unknown) => e,
      );
      assert.ok(err instanceof want.cls, `${String(err)} is not a ${want.name}`);
      assert.ok(err instanceof WaitError && err instanceof Error);
      const other = want.cls === WaitTimeoutError ? WaitRejectedError : WaitTimeoutError;
      assert.ok(!(err instanceof other), `${String(err)} is also a ${other.name}`);
      assert.deepStrictEqual([err.name, err.message, err.kind, err instanceof WaitRejectedError ? err.reason : undefined], [
        want.name,
        want.message,
        want.cls === WaitTimeoutError ? "timeout" : "rejected",
        want.reason,
      ]);
      assert.deepStrictEqual(await ctx.wait.human.result({ displayText: "Ship it?" }), answer);
    });
  }

  it("keeps the SDK's wait errors apart from other errors", () => {
    assert.ok(!(new Error("x") instanceof WaitError));
    assert.ok(!(Object.assign(new Error("x"), { kind: "timeout", name: "WaitTimeoutError" }) instanceof WaitTimeoutError));
    assert.ok(!({ [Symbol.for("helmr.waitError")]: "timeout" } instanceof WaitError), "a plain object is not an Error");
    const own = new WaitRejectedError("no");
    assert.ok(own instanceof WaitRejectedError && own instanceof WaitError && !(own instanceof WaitTimeoutError));
    assert.deepStrictEqual([own.name, own.message, own.reason, own.kind], ["WaitRejectedError", "the wait was rejected: no", "no", "rejected"]);
    class Mine extends WaitTimeoutError {}
    assert.ok(new Mine() instanceof Mine && new Mine() instanceof WaitTimeoutError);
    assert.ok(!(new WaitTimeoutError() instanceof Mine), "a subclass matches by prototype only");
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
    const ctx = createContext({ id: "run_1", taskId: "t" }, fakeWorker({ "wait.forToken": { ok: "yes" }, "wait.human": { ok: false } }).request);
    await assert.rejects(ctx.wait.forToken("wp_1"), /malformed answer from the worker/);
    await assert.rejects(ctx.wait.human({ displayText: "ok?" }), (err: unknown) => !(err instanceof WaitError) && /malformed answer/.test(String(err)));
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
    ["an empty displayText (result)", (c) => c.wait.human.result({ displayText: "" }), /displayText must be a non-empty string/],
    ["an array schema", (c) => c.wait.human({ displayText: "ok?", schema: [] as never }), /schema must be a JSON Schema object/],
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
