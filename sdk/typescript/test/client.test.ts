import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import { after, before, describe, it } from "node:test";

import {
  BadRequestError,
  ConflictError,
  ConnectionError,
  ForbiddenError,
  HelmrApiError,
  HelmrClient,
  NotFoundError,
  RateLimitError,
  ServerError,
  UnauthorizedError,
} from "../src/client/index.js";
import { FakeAPI, json, type Seen } from "./fake-api.js";

const run = { id: "run_1", project: "p", env: "dev", taskId: "t", status: "QUEUED", payload: 1, lastSeq: 1 };

describe("HelmrClient", () => {
  const api = new FakeAPI();
  let client: HelmrClient;
  before(async () => {
    await api.start();
    client = new HelmrClient({ baseURL: api.url + "/", apiKey: "hk_k_s", project: "p" });
  });
  after(() => api.server.close());

  it("sends the credential and the scope, and reads the answer", async () => {
    api.reset();
    api.handlers.set("POST /v1/tasks/t/runs", (_s, res) => json(res, 201, run));
    const r = await client.runs.trigger("t", { n: 1 }, { env: "prod", idempotencyKey: "k" });
    assert.equal(r.id, "run_1");
    const s = api.seen[0]!;
    assert.equal(s.url, "/v1/tasks/t/runs?project=p&env=prod");
    assert.equal(s.headers.authorization, "Bearer hk_k_s");
    assert.deepStrictEqual(JSON.parse(s.body), { payload: { n: 1 }, idempotencyKey: "k" });
  });

  it("replays a run with overrides and acts in bulk on a filter of the scope", async () => {
    api.reset();
    api.handlers.set("POST /v1/runs/run_1/replay", (_s, res) => json(res, 201, { ...run, id: "run_2", replayOf: "run_1" }));
    const result = { matched: 1, counts: { canceled: 1 }, runs: [{ runId: "run_1", status: "QUEUED", action: "canceled" }], more: false };
    api.handlers.set("POST /v1/runs/bulk/cancel", (_s, res) => json(res, 200, result));
    api.handlers.set("POST /v1/runs/bulk/replay", (_s, res) => json(res, 200, { ...result, counts: { replayed: 1 } }));
    const r = await client.runs.replay("run_1", { payload: { n: 2 }, tags: [] });
    assert.equal(r.replayOf, "run_1");
    assert.deepStrictEqual(JSON.parse(api.seen[0]!.body), { payload: { n: 2 }, tags: [] });
    const c = await client.runs.bulkCancel({ env: "prod", tag: "nightly", status: "QUEUED", limit: 10 });
    assert.equal(c.counts.canceled, 1);
    assert.equal(api.seen[1]!.url, "/v1/runs/bulk/cancel?project=p&env=prod");
    assert.deepStrictEqual(JSON.parse(api.seen[1]!.body), { tag: "nightly", status: "QUEUED", limit: 10 });
    await client.runs.bulkReplay({ ids: ["run_1"] }, { payload: null });
    assert.deepStrictEqual(JSON.parse(api.seen[2]!.body), { ids: ["run_1"], overrides: { payload: null } });
  });

  it("takes HELMR_URL, HELMR_API_KEY and HELMR_PROJECT by default", async () => {
    api.reset();
    api.handlers.set("GET /v1/runs", (_s, res) => json(res, 200, { runs: [run] }));
    const saved = { ...process.env };
    Object.assign(process.env, { HELMR_URL: api.url, HELMR_API_KEY: "hk_env_s", HELMR_PROJECT: "q" });
    try {
      const page = await new HelmrClient().runs.list({ status: "QUEUED" });
      assert.equal(page.runs.length, 1);
      assert.equal(api.seen[0]!.url, "/v1/runs?project=q&env=dev&status=QUEUED");
      assert.equal(api.seen[0]!.headers.authorization, "Bearer hk_env_s");
    } finally {
      process.env = saved;
    }
  });

  const classes: Array<[number, new (...a: any[]) => HelmrApiError]> = [
    [400, BadRequestError],
    [401, UnauthorizedError],
    [403, ForbiddenError],
    [404, NotFoundError],
    [409, ConflictError],
    [500, ServerError],
  ];
  for (const [status, Class] of classes) {
    it(`answers ${status} with ${Class.name}`, async () => {
      api.reset();
      api.handlers.set("POST /v1/tokens/wp_1/complete", (_s, res) => json(res, status, { error: { code: `c${status}`, message: `m${status}` } }));
      const err = await client.tokens.complete("wp_1", { ok: true }).then(
        () => assert.fail("no error"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof Class, `${String(err)} is not a ${Class.name}`);
      assert.ok(err instanceof HelmrApiError);
      assert.equal(err.status, status);
      assert.equal(err.code, `c${status}`);
      assert.equal(err.message, `m${status}`);
      // complete is idempotent: a 500 is retried (3 times), others are not.
      assert.equal(api.seen.length, status === 500 ? 4 : 1);
    });
  }

  it("retries 429 and 503 after the server's Retry-After, even when not idempotent", async () => {
    api.reset();
    api.handlers.set("POST /v1/runs/run_1/cancel", (_s, res, n) => {
      if (n === 1) return json(res, 429, { error: { code: "rate_limited", message: "slow down" } }, { "Retry-After": "1" });
      if (n === 2) return json(res, 503, { error: { code: "unavailable", message: "later" } }, { "Retry-After": "0" });
      json(res, 200, { ...run, status: "CANCELED" });
    });
    const r = await client.runs.cancel("run_1");
    assert.equal(r.status, "CANCELED");
    assert.equal(api.seen.length, 3);
    const waited = api.seen[1]!.at - api.seen[0]!.at;
    assert.ok(waited >= 950 && waited < 3000, `retried after ${waited} ms, want about 1000 (Retry-After: 1)`);
  });

  it("gives up with RateLimitError after maxRetries", async () => {
    api.reset();
    api.handlers.set("GET /v1/runs/run_1", (_s, res) => json(res, 429, { error: { code: "rate_limited", message: "no" } }, { "Retry-After": "0" }));
    const c = new HelmrClient({ baseURL: api.url, apiKey: "k", maxRetries: 2 });
    await assert.rejects(c.runs.retrieve("run_1"), (e: unknown) => e instanceof RateLimitError && e.retryAfterMs === 0);
    assert.equal(api.seen.length, 3);
  });

  it("retries a lost connection only for idempotent calls", async () => {
    api.reset();
    const drop = (_s: Seen, res: ServerResponse, n: number) => (n === 1 ? res.socket?.destroy() : json(res, 200, run));
    api.handlers.set("GET /v1/runs/run_1", drop);
    api.handlers.set("POST /v1/runs/run_1/cancel", drop);
    assert.equal((await client.runs.retrieve("run_1")).id, "run_1");
    assert.equal(api.seen.length, 2);
    await assert.rejects(client.runs.cancel("run_1"), ConnectionError);
    assert.equal(api.seen.length, 3);
  });

  it("appends to a session with an idempotency key that a retry reuses", async () => {
    api.reset();
    api.handlers.set("POST /v1/runs/run_1/session/input", (s, res, n) => {
      if (n === 1) return res.socket?.destroy();
      json(res, 201, { runId: "run_1", stream: "input", seq: 1, time: "t", ...JSON.parse(s.body) });
    });
    const rec = await client.sessions.sendInput("run_1", { text: "hi" });
    assert.equal(rec.seq, 1);
    const [a, b] = api.seen.map((s) => JSON.parse(s.body) as { idempotencyKey: string; data: unknown });
    assert.deepStrictEqual(a!.data, { text: "hi" });
    assert.ok(a!.idempotencyKey.length > 0);
    assert.equal(b!.idempotencyKey, a!.idempotencyKey);
  });

  it("reads a session stream over SSE and resumes with Last-Event-ID after a drop", async () => {
    api.reset();
    const record = (seq: number) =>
      `id: ${seq}\nevent: record\ndata: ${JSON.stringify({ runId: "run_1", stream: "output", seq, time: "t", data: { n: seq } })}\n\n`;
    api.handlers.set("GET /v1/runs/run_1/session/output/stream", (s, res, n) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (n === 1) {
        res.write(": keepalive\n\n" + record(1) + record(2));
        setTimeout(() => res.socket?.destroy(), 50); // the connection drops mid-stream
        return;
      }
      if (n === 2) {
        res.end(); // closed before the end event: reconnect
        return;
      }
      // Resumed from the last id the client saw; a repeat of 2 is dropped.
      const from = Number(s.headers["last-event-id"]);
      res.end(record(from) + record(from + 1) + record(from + 2) + "event: end\ndata: {}\n\n");
    });
    const got: number[] = [];
    for await (const rec of client.sessions.readOutput("run_1")) got.push(rec.seq);
    assert.deepStrictEqual(got, [1, 2, 3, 4]);
    assert.deepStrictEqual(
      api.seen.map((s) => s.headers["last-event-id"]),
      [undefined, "2", "2"],
    );
  });

  it("starts a read after a cursor and stops on a 404", async () => {
    api.reset();
    api.handlers.set("GET /v1/runs/run_1/session/input/stream", (s, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.end(`id: 6\nevent: record\ndata: {"runId":"run_1","stream":"input","seq":6,"time":"t","data":1}\n\nevent: end\ndata: {}\n\n`);
    });
    const got: number[] = [];
    for await (const rec of client.sessions.readInput("run_1", { after: 5 })) got.push(rec.seq);
    assert.deepStrictEqual(got, [6]);
    assert.equal(api.seen[0]!.headers["last-event-id"], "5");
    const it = client.sessions.readOutput("run_missing");
    await assert.rejects(it.next(), NotFoundError);
  });
});
