import { spawn } from "node:child_process";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { Duplex } from "node:stream";
import { fileURLToPath } from "node:url";

// .build/runtime/typescript/test/helpers.js
const here = dirname(fileURLToPath(import.meta.url));
export const buildSrc = join(here, "..", "src");
export const fixtures = join(here, "fixtures");

export interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Lines the child wrote on fd 3, parsed, but for requests (answered by runAdapter's answer). */
  messages: unknown[];
}

/**
 * runAdapter starts the compiled adapter with fd 3 as a socket pair, sends
 * the given first line, and collects everything until the child exits.
 */
export async function runAdapter(
  firstLine: string | undefined,
  options: { halfClose?: boolean; answer?: (request: { id: number; method: string; params?: unknown }) => unknown } = {},
): Promise<Exit & { cwd: string }> {
  const cwd = await mkdtemp(join(tmpdir(), "helmr-adapter-"));
  const child = spawn(process.execPath, [join(buildSrc, "adapter.js")], { cwd, stdio: ["pipe", "pipe", "pipe", "pipe"] });
  const channel = child.stdio[3] as Duplex;
  let stdout = "";
  let stderr = "";
  let fd3 = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  channel.setEncoding("utf8");
  let seen = 0;
  channel.on("data", (d: string) => {
    fd3 += d;
    // Answer requests as a worker would (result, or error if answer throws).
    const lines = fd3.split("\n");
    for (; seen < lines.length - 1; seen++) {
      const m = JSON.parse(lines[seen]!) as { type?: string; id: number; method: string; params?: unknown };
      if (m.type !== "request" || options.answer === undefined) continue;
      let reply: unknown;
      try {
        reply = { type: "response", id: m.id, result: options.answer(m) };
      } catch (err) {
        reply = { type: "response", id: m.id, error: { message: (err as Error).message } };
      }
      channel.write(`${JSON.stringify(reply)}\n`);
    }
  });
  channel.on("error", () => {});
  if (firstLine !== undefined) channel.write(`${firstLine}\n`);
  if (firstLine === undefined || options.halfClose === true) channel.end();
  const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
  const messages = fd3
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as unknown)
    .filter((m) => (m as { type?: string }).type !== "request");
  return { code, stdout, stderr, messages, cwd };
}

/** runIndexer runs the compiled index runner with args. */
export async function runIndexer(args: string[]): Promise<Exit & { json: unknown }> {
  const child = spawn(process.execPath, [join(buildSrc, "index-runner.js"), ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
  let json: unknown;
  try {
    json = JSON.parse(stdout);
  } catch {
    json = undefined;
  }
  return { code, stdout, stderr, messages: [], json };
}

/** startLine builds a start message for a fixture export. */
export function startLine(exportName: string, payload?: unknown, module = join(fixtures, "tasks.js")): string {
  return JSON.stringify({ type: "start", module, export: exportName, payload, run: { id: "run_1", taskId: exportName } });
}
