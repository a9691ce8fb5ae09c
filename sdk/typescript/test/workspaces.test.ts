import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";

import { ConflictError, ConnectionError, HelmrClient, NotFoundError, type ExecEvent, type Workspace } from "../src/client/index.js";
import { defaultURL } from "../src/client/http.js";
import { FakeAPI, json } from "./fake-api.js";

const ws: Workspace = { id: "ws_1", project: "p", env: "dev", taskId: "t", sandbox: "box", createdAt: "2025-01-01T00:00:00Z" };
const result = { exitCode: 0, stdout: "hi\n", stderr: "", durationMs: 12.5 };

describe("HelmrClient.workspaces", () => {
  const api = new FakeAPI();
  let client: HelmrClient;
  before(async () => {
    await api.start();
    client = new HelmrClient({ baseURL: api.url, apiKey: "hk_k_s", project: "p" });
  });
  after(() => api.server.close());

  it("creates a workspace from a task or from a sandbox, with a quota", async () => {
    api.reset();
    api.handlers.set("POST /v1/workspaces", (_s, res) => json(res, 201, ws));
    assert.deepStrictEqual(await client.workspaces.create({ task: "t" }), ws);
    await client.workspaces.create({ sandbox: "box", quota: "20Gi", env: "prod" });
    assert.deepStrictEqual(
      api.seen.map((s) => [s.url, JSON.parse(s.body)]),
      [
        ["/v1/workspaces?project=p&env=dev", { task: "t" }],
        ["/v1/workspaces?project=p&env=prod", { sandbox: "box", quota: "20Gi" }],
      ],
    );
    assert.throws(() => client.workspaces.create({} as { task: string }), TypeError);
    assert.throws(() => client.workspaces.create({ task: "t", sandbox: "box" } as unknown as { task: string }), TypeError);
    assert.equal(api.seen.length, 2);
  });

  it("retrieves, lists and deletes", async () => {
    api.reset();
    api.handlers.set("GET /v1/workspaces/ws_1", (_s, res) => json(res, 200, ws));
    api.handlers.set("GET /v1/workspaces", (_s, res) => json(res, 200, { workspaces: [ws] }));
    api.handlers.set("DELETE /v1/workspaces/ws_1", (_s, res) => {
      res.writeHead(204);
      res.end();
    });
    assert.equal((await client.workspaces.retrieve("ws_1")).sandbox, "box");
    assert.deepStrictEqual((await client.workspaces.list({ limit: 5 })).workspaces, [ws]);
    assert.equal(await client.workspaces.delete("ws_1"), undefined);
    await assert.rejects(client.workspaces.retrieve("ws_gone"), NotFoundError);
    assert.deepStrictEqual(
      api.seen.map((s) => `${s.method} ${s.url}`),
      ["GET /v1/workspaces/ws_1", "GET /v1/workspaces?project=p&env=dev&limit=5", "DELETE /v1/workspaces/ws_1", "GET /v1/workspaces/ws_gone"],
    );
  });

  it("answers an exec's output as bytes, lossless, with execBytes", async () => {
    api.reset();
    api.handlers.set("POST /v1/workspaces/ws_1/exec", (_s, res) =>
      json(res, 200, { exitCode: 0, stdout: "Yf8AYg==", stderr: "", durationMs: 1, outputEncoding: "base64" }),
    );
    const got = await client.workspaces.execBytes("ws_1", { command: "printf 'a\\377\\000b'" });
    assert.deepStrictEqual([...got.stdout], [0x61, 0xff, 0x00, 0x62]);
    assert.equal(got.stderr.length, 0);
    assert.equal(JSON.parse(api.seen[0]!.body).outputEncoding, "base64");
    api.handlers.set("POST /v1/workspaces/ws_1/exec", (_s, res) => json(res, 200, result));
    await assert.rejects(client.workspaces.execBytes("ws_1", { argv: ["true"] }), ConnectionError);
  });

  it("runs a command and answers its result; a lost connection is not retried", async () => {
    api.reset();
    api.handlers.set("POST /v1/workspaces/ws_1/exec", (_s, res, n) => (n === 2 ? res.socket?.destroy() : json(res, 200, result)));
    const got = await client.workspaces.exec("ws_1", { argv: ["echo", "hi"], cwd: "src", env: { A: "1" }, timeoutSeconds: 5 });
    assert.equal(got.stdout, "hi\n");
    assert.deepStrictEqual(JSON.parse(api.seen[0]!.body), { argv: ["echo", "hi"], cwd: "src", env: { A: "1" }, timeoutSeconds: 5 });
    await assert.rejects(client.workspaces.exec("ws_1", { command: "make" }), ConnectionError);
    assert.equal(api.seen.length, 2, "an exec is not idempotent: never sent twice");
  });

  it("streams a command's output, then its result", async () => {
    api.reset();
    api.handlers.set("POST /v1/workspaces/ws_1/exec/stream", (_s, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write('event: output\ndata: {"stream":"stdout","data":"one\\n"}\n\n');
      res.end('event: output\ndata: {"stream":"stderr","data":"two\\n"}\n\nevent: result\ndata: ' + JSON.stringify(result) + "\n\n");
    });
    const got: ExecEvent[] = [];
    for await (const ev of client.workspaces.execStream("ws_1", { command: "echo one; echo two >&2" })) got.push(ev);
    assert.deepStrictEqual(got, [
      { type: "output", stream: "stdout", data: "one\n" },
      { type: "output", stream: "stderr", data: "two\n" },
      { type: "result", result },
    ]);
    assert.equal(api.seen[0]!.headers.accept, "text/event-stream");
    assert.deepStrictEqual(JSON.parse(api.seen[0]!.body), { command: "echo one; echo two >&2" });
  });

  it("throws a streamed error as its status's class, and a cut stream as a ConnectionError", async () => {
    api.reset();
    api.handlers.set("POST /v1/workspaces/ws_1/exec/stream", (_s, res, n) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (n === 1) return res.end('event: error\ndata: {"status":409,"code":"conflict","message":"run_1 holds it"}\n\n');
      res.end('event: output\ndata: {"stream":"stdout","data":"x\\n"}\n\n');
    });
    const drain = async () => {
      for await (const _ of client.workspaces.execStream("ws_1", { command: "x" }));
    };
    await assert.rejects(drain(), (e: unknown) => e instanceof ConflictError && e.code === "conflict" && e.message === "run_1 holds it");
    await assert.rejects(drain(), ConnectionError);
  });

  it("writes and reads a file's bytes, lists a directory and reads the trajectory", async () => {
    api.reset();
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
    let stored: Buffer = Buffer.alloc(0);
    api.handlers.set("PUT /v1/workspaces/ws_1/files", (s, res) => {
      stored = s.bytes;
      res.writeHead(204);
      res.end();
    });
    api.handlers.set("GET /v1/workspaces/ws_1/files", (_s, res) => {
      res.writeHead(200, { "Content-Type": "application/octet-stream" });
      res.end(stored);
    });
    api.handlers.set("GET /v1/workspaces/ws_1/dir", (_s, res) =>
      json(res, 200, { path: "a b", entries: [{ name: "f", type: "file", size: 256, mode: "644" }] }),
    );
    api.handlers.set("GET /v1/workspaces/ws_1/trajectory", (_s, res) =>
      json(res, 200, { workspaceId: "ws_1", operations: [{ workspaceId: "ws_1", seq: 3, kind: "file.read", request: { path: "f" }, startedAt: "t", durationMs: 1 }] }),
    );
    await client.workspaces.files.write("ws_1", "a b/f", bytes);
    assert.equal(api.seen[0]!.url, "/v1/workspaces/ws_1/files?path=a%20b%2Ff");
    assert.equal(api.seen[0]!.headers["content-type"], "application/octet-stream");
    assert.deepStrictEqual(new Uint8Array(stored), bytes);
    assert.deepStrictEqual(await client.workspaces.files.read("ws_1", "a b/f"), bytes);
    await client.workspaces.files.write("ws_1", "t", "héllo\n");
    assert.equal(await client.workspaces.files.readText("ws_1", "t"), "héllo\n");
    const dir = await client.workspaces.files.list("ws_1", "a b");
    assert.deepStrictEqual(dir.entries.map((e) => [e.name, e.type, e.size]), [["f", "file", 256]]);
    const tr = await client.workspaces.trajectory("ws_1", { after: 2, limit: 10 });
    assert.equal(tr.operations[0]!.kind, "file.read");
    assert.deepStrictEqual(
      api.seen.slice(3).map((s) => s.url),
      ["/v1/workspaces/ws_1/files?path=t", "/v1/workspaces/ws_1/dir?path=a%20b", "/v1/workspaces/ws_1/trajectory?after=2&limit=10"],
    );
  });
});

describe("HelmrClient's default URL", () => {
  it("is the server's default address, as proto/openapi.yaml names it", async () => {
    const doc = readFileSync(new URL("../../../../proto/openapi.yaml", import.meta.url), "utf8");
    const server = /^servers:\n\s+- url: (\S+)$/m.exec(doc)?.[1];
    assert.equal(defaultURL, server);
    const saved = process.env.HELMR_URL;
    delete process.env.HELMR_URL;
    try {
      const urls: string[] = [];
      const fetch = async (url: string) => {
        urls.push(url);
        return { status: 200, headers: { get: () => null }, text: async () => JSON.stringify(ws), arrayBuffer: async () => new ArrayBuffer(0), body: null };
      };
      await new HelmrClient({ apiKey: "k", fetch }).workspaces.retrieve("ws_1");
      assert.deepStrictEqual(urls, ["http://127.0.0.1:8480/v1/workspaces/ws_1"]);
    } finally {
      if (saved !== undefined) process.env.HELMR_URL = saved;
    }
  });
});
