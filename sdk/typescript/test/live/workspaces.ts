// Drives HelmrClient's workspaces resource against a real control plane
// (HELMR_URL, HELMR_API_KEY, HELMR_PROJECT) on which the project
// internal/e2e/testdata/workspace is deployed. internal/e2e's
// TestSDKWorkspaces bundles this file with esbuild and runs it with node
// against helmr dev; scripts/ts-check.sh type-checks it. It exits non-zero
// on the first assertion that fails, and prints one JSON line of what it
// saw for the Go test to check again from its side.

import assert from "node:assert/strict";

import { BadRequestError, ConflictError, HelmrClient, NotFoundError, type ExecEvent } from "../../src/client/index.js";

const client = new HelmrClient();
const { workspaces } = client;

// Made from a named sandbox, and from a task (whose sandbox declares a 24Mi disk).
const ws = await workspaces.create({ sandbox: "notes" });
assert.equal(ws.sandbox, "notes");
assert.equal(ws.taskId, "notes");
const sized = await workspaces.create({ task: "sized" });
assert.equal(sized.quotaBytes, 24 << 20);
assert.deepStrictEqual(await workspaces.retrieve(ws.id), ws);
const listed = (await workspaces.list()).workspaces.map((w) => w.id);
assert.ok(listed.includes(ws.id) && listed.includes(sized.id), `list = ${listed.join(", ")}`);

// A real command in the workspace's sandbox.
const failed = await workspaces.exec(ws.id, { command: "echo out; echo err >&2; pwd; exit 3" });
assert.equal(failed.exitCode, 3);
assert.equal(failed.stdout, "out\n/workspace\n");
assert.equal(failed.stderr, "err\n");

// Files: bytes and text round-trip, a command sees them, a listing names them.
const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
await workspaces.files.write(ws.id, "dir/bytes.bin", bytes);
assert.deepStrictEqual(await workspaces.files.read(ws.id, "dir/bytes.bin"), bytes);
await workspaces.files.write(ws.id, "dir/hello.txt", "héllo\n");
assert.equal(await workspaces.files.readText(ws.id, "dir/hello.txt"), "héllo\n");
const dir = await workspaces.files.list(ws.id, "dir");
assert.deepStrictEqual(
  dir.entries.map((e) => [e.name, e.type, e.size]),
  [
    ["bytes.bin", "file", 256],
    ["hello.txt", "file", 7],
  ],
);
const cat = await workspaces.exec(ws.id, { argv: ["cat", "dir/hello.txt"] });
assert.deepStrictEqual([cat.exitCode, cat.stdout], [0, "héllo\n"]);

// The streaming exec yields the output as printed, then the result.
const events: ExecEvent[] = [];
for await (const ev of workspaces.execStream(ws.id, { command: "echo a; echo b >&2; echo c" })) events.push(ev);
const last = events.at(-1);
assert.ok(last?.type === "result" && last.result.exitCode === 0, `last event = ${JSON.stringify(last)}`);
const printed = (stream: string) =>
  events
    .filter((e) => e.type === "output" && e.stream === stream)
    .map((e) => (e.type === "output" ? e.data : ""))
    .join("");
assert.equal(printed("stdout"), "a\nc\n");
assert.equal(printed("stderr"), "b\n");
assert.deepStrictEqual([last.result.stdout, last.result.stderr], ["a\nc\n", "b\n"]);

// Errors are the classes of their statuses.
await assert.rejects(workspaces.files.read(ws.id, "missing.txt"), NotFoundError);
await assert.rejects(workspaces.files.read(ws.id, "../etc/passwd"), BadRequestError);
await assert.rejects(workspaces.retrieve("ws_nosuch"), NotFoundError);

// The trajectory holds every operation above, in order, from a cursor.
const kinds = ["exec", "file.write", "file.read", "file.write", "file.read", "file.list", "exec", "exec.stream", "file.read"];
const trajectory = await workspaces.trajectory(ws.id);
assert.equal(trajectory.workspaceId, ws.id);
assert.deepStrictEqual(
  trajectory.operations.map((op) => op.kind),
  kinds,
);
assert.deepStrictEqual(
  trajectory.operations.map((op) => op.seq),
  kinds.map((_, i) => i + 1),
);
assert.deepStrictEqual(trajectory.operations[0]!.request, { command: "echo out; echo err >&2; pwd; exit 3" });
assert.equal((trajectory.operations[0]!.result as { exitCode?: number }).exitCode, 3);
const rest = await workspaces.trajectory(ws.id, { after: 7, limit: 1 });
assert.deepStrictEqual(
  rest.operations.map((op) => op.seq),
  [8],
);

// Deleted: retrieve shows it; no more operations.
await workspaces.delete(sized.id);
assert.ok((await workspaces.retrieve(sized.id)).deletedAt, "a deleted workspace has deletedAt");
await assert.rejects(workspaces.exec(sized.id, { argv: ["true"] }), ConflictError);

console.log(JSON.stringify({ workspace: ws.id, deleted: sized.id, operations: trajectory.operations.length }));
