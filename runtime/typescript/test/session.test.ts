import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type { TaskContext } from "../../../sdk/typescript/src/index.js";
import { createContext, settle } from "../src/context.js";

/** A worker stand-in that serves the run's input from a list, records the rest. */
function sessionWorker(input: Array<{ seq: number; data: unknown }>) {
  const requests: Array<{ method: string; params?: any }> = [];
  let release: () => void = () => {};
  const more = new Promise<void>((resolve) => (release = resolve));
  const request = async (method: string, params?: any): Promise<unknown> => {
    requests.push({ method, params });
    switch (method) {
      case "session.input.next": {
        let recs = input.filter((r) => r.seq > params.after);
        if (recs.length === 0) {
          await more; // a long poll until more input arrives
          recs = input.filter((r) => r.seq > params.after);
        }
        return { records: recs };
      }
      case "session.output.append":
        return { seq: requests.filter((r) => r.method === method).length };
      case "metadata.set":
        return null;
    }
    throw new Error(`unexpected ${method}`);
  };
  return { requests, request, push: (r: { seq: number; data: unknown }) => (input.push(r), release()) };
}

describe("ctx.session", () => {
  it("yields each input record once, in order, across iterations", async () => {
    // The worker may answer with records already seen: they are skipped.
    const w = sessionWorker([
      { seq: 1, data: "a" },
      { seq: 2, data: { b: 2 } },
    ]);
    const ctx: TaskContext = createContext({ id: "run_1", taskId: "t" }, w.request);
    const got: unknown[] = [];
    for await (const msg of ctx.session.input) {
      got.push(msg);
      if (got.length === 1) break;
    }
    const later = (async () => {
      for await (const msg of ctx.session.input) {
        got.push(msg);
        if (got.length === 3) break;
      }
    })();
    w.push({ seq: 3, data: null });
    await later;
    assert.deepStrictEqual(got, ["a", { b: 2 }, null]);
    const afters = w.requests.filter((r) => r.method === "session.input.next").map((r) => r.params.after);
    assert.deepStrictEqual(afters, [0, 2]);
  });

  it("appends output with an idempotency key and waits for appends on settle", async () => {
    const w = sessionWorker([]);
    const ctx = createContext({ id: "run_1", taskId: "t" }, w.request);
    assert.deepStrictEqual(await ctx.session.output.append({ n: 1 }, { idempotencyKey: "k1" }), { seq: 1 });
    void ctx.session.output.append("not awaited");
    await settle(ctx);
    const appends = w.requests.filter((r) => r.method === "session.output.append");
    assert.deepStrictEqual(appends[0]!.params, { id: "k1", data: { n: 1 } });
    assert.equal(appends[1]!.params.data, "not awaited");
    assert.match(appends[1]!.params.id, /^[0-9a-f-]{36}$/);
    await assert.rejects(ctx.session.output.append(undefined), /not JSON-serializable/);
    await assert.rejects(ctx.session.output.append(1, { idempotencyKey: "" }), /idempotencyKey/);
  });

  it("rejects without a worker", async () => {
    const ctx = createContext({ id: "run_1", taskId: "t" });
    await assert.rejects(ctx.session.output.append(1), /needs the Helmr worker/);
    await assert.rejects(ctx.session.input[Symbol.asyncIterator]().next(), /needs the Helmr worker/);
  });
});

describe("ctx.metadata", () => {
  it("sets through the worker and gets what was set", async () => {
    const w = sessionWorker([]);
    const ctx: TaskContext = createContext({ id: "run_1", taskId: "t" }, w.request);
    assert.equal(ctx.metadata.get("progress"), undefined);
    await ctx.metadata.set("progress", { done: 1, at: new Date("2030-01-01T00:00:00Z") });
    assert.deepStrictEqual(ctx.metadata.get("progress"), { done: 1, at: "2030-01-01T00:00:00.000Z" });
    assert.deepStrictEqual(w.requests, [
      { method: "metadata.set", params: { key: "progress", value: { done: 1, at: "2030-01-01T00:00:00.000Z" } } },
    ]);
    await assert.rejects(ctx.metadata.set("", 1), /key must be/);
    await assert.rejects(ctx.metadata.set("k", () => 1), /not JSON-serializable/);
  });
});
