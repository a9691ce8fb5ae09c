// A real `helmr dev` for browser tests: the repository's bin/helmr (built by
// scripts/setup.sh; HELMR_BIN overrides), started on a free loopback port
// with a data dir, CLI profile and sandbox state root of its own, and the
// CLI and API against it.
import { spawn, execFile } from "node:child_process";
import { mkdtemp, chmod, readFile, rm, access } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir, homedir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The helmr dev processes being stopped on purpose. */
const stopping = new WeakSet();

/** The repository's root (console/e2e/lib is three levels down). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

/** helmr's path: HELMR_BIN, or bin/helmr that scripts/setup.sh builds. */
export function helmrBin() {
  return process.env.HELMR_BIN || path.join(repoRoot, "bin", "helmr");
}

/**
 * Dev is a running helmr dev: its URL, its owner credential (read from the
 * profile it writes for the CLI), the CLI and the API with that credential.
 */
export class Dev {
  /** @param {{url: string, token: string, env: NodeJS.ProcessEnv, tmp: string, proc: import("node:child_process").ChildProcess, logs: string[]}} o */
  constructor(o) {
    Object.assign(this, o);
  }

  /**
   * Runs the CLI against this helmr dev from the repository root and
   * returns stdout; a non-zero exit throws with both streams.
   * @param {string[]} args
   */
  async helmr(...args) {
    try {
      const { stdout } = await run(helmrBin(), args, { env: this.env, cwd: repoRoot, timeout: 180_000, maxBuffer: 64 << 20 });
      return stdout;
    } catch (err) {
      throw new Error(`helmr ${args.join(" ")} failed (exit ${err.code}):\nstdout: ${err.stdout}\nstderr: ${err.stderr}`);
    }
  }

  /** Deploys a project directory (relative to the repository root). */
  async deploy(dir) {
    await this.helmr("deploy", dir);
  }

  /**
   * Starts a run with the CLI and returns it (helmr run --json).
   * @param {string} project @param {string} task @param {unknown} payload
   */
  async trigger(project, task, payload) {
    const out = await this.helmr("run", task, "--project", project, "--payload-json", JSON.stringify(payload), "--json");
    return JSON.parse(out);
  }

  /**
   * Calls the API with the owner credential; a status other than 2xx throws.
   * @param {string} method @param {string} p @param {unknown} [body]
   */
  async api(method, p, body) {
    const res = await fetch(this.url + p, {
      method,
      headers: { Authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${p} = ${res.status}: ${text}`);
    return text ? JSON.parse(text) : undefined;
  }

  /**
   * Polls the run until pred(run) holds; throws with the last state at the
   * deadline.
   * @param {string} id @param {(r: any) => boolean} pred @param {number} [within]
   */
  async waitRun(id, pred, within = 120_000) {
    const deadline = Date.now() + within;
    for (;;) {
      const r = await this.api("GET", `/v1/runs/${id}`);
      if (pred(r)) return r;
      if (Date.now() > deadline) throw new Error(`run ${id}: condition not met within ${within} ms; last: ${JSON.stringify(r).slice(0, 2000)}`);
      await new Promise((ok) => setTimeout(ok, 100));
    }
  }

  /** The log of helmr dev so far (stderr), for failure messages. */
  log() {
    return this.logs.join("");
  }

  /** Stops helmr dev (SIGINT, SIGKILL after 15 s), unmounts what its sandboxes left under its state root and removes its files. */
  async stop() {
    stopping.add(this.proc);
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((ok) => this.proc.once("exit", ok));
      this.proc.kill("SIGINT");
      const timer = setTimeout(() => this.proc.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    }
    await unmountUnder(this.tmp);
    await rm(this.tmp, { recursive: true, force: true });
  }
}

/**
 * Starts helmr dev. The isolation tier is HELMR_E2E_RUNTIME (default
 * "auto": gVisor where runsc works, else the process tier); the base image
 * cache is HELMR_CACHE_DIR or ~/.cache/helmr, where setup builds it.
 * @param {{runtime?: string, env?: Record<string, string>}} [opts]
 * @returns {Promise<Dev>}
 */
export async function startDev(opts = {}) {
  const bin = helmrBin();
  try {
    await access(bin);
  } catch {
    throw new Error(`no helmr binary at ${bin}: run scripts/setup.sh (or set HELMR_BIN)`);
  }
  const tmp = await mkdtemp(path.join(tmpdir(), "helmr-browser-"));
  await chmod(tmp, 0o711); // sandboxes' users traverse to their state
  const env = {
    ...process.env,
    HELMR_DATA_DIR: path.join(tmp, "data"),
    HELMR_PROFILE: path.join(tmp, "profile.json"),
    HELMR_STATE_DIR: path.join(tmp, "run"),
    HELMR_ADDR: "127.0.0.1:0",
    HELMR_CACHE_DIR: process.env.HELMR_CACHE_DIR || path.join(homedir(), ".cache", "helmr"),
    HELMR_RUNTIME: opts.runtime || process.env.HELMR_E2E_RUNTIME || "auto",
    HELMR_URL: "",
    HELMR_PROJECT: "",
    HELMR_API_KEY: "",
    HELMR_OWNER_TOKEN: "",
    HELMR_OWNER_TOKEN_FILE: "",
    ...opts.env,
  };
  const proc = spawn(bin, ["dev"], { env, stdio: ["ignore", "pipe", "pipe"] });
  const logs = [];
  proc.stderr.setEncoding("utf8").on("data", (s) => logs.push(s));
  let out = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`helmr dev printed no URL within 30 s; log:\n${logs.join("")}`)), 30_000);
    proc.stdout.setEncoding("utf8").on("data", (s) => {
      out += s;
      const m = /^Helmr dev at (\S+)/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.once("exit", (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`helmr dev exited (${code ?? sig}) before printing its URL; log:\n${logs.join("")}`));
    });
  }).catch(async (err) => {
    proc.kill("SIGKILL");
    await rm(tmp, { recursive: true, force: true });
    throw err;
  });
  proc.stdout.resume(); // keep draining
  proc.once("exit", (code, sig) => {
    // A helmr dev that stops under a test is a failure to see, with its log.
    if (!stopping.has(proc)) process.stderr.write(`helmr dev exited (${code ?? sig}) during the tests; its log:\n${logs.join("")}\n`);
  });
  const profile = JSON.parse(await readFile(env.HELMR_PROFILE, "utf8"));
  if (!profile.credential || profile.url !== url) {
    proc.kill("SIGKILL");
    throw new Error(`helmr dev's profile has url ${profile.url} and ${profile.credential ? "a" : "no"} credential; want ${url} and one`);
  }
  return new Dev({ url, token: profile.credential, env: { ...env, HELMR_URL: url }, tmp, proc, logs });
}

/** Lazily unmounts every mount point under dir, deepest first. */
async function unmountUnder(dir) {
  let info = "";
  try {
    info = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return;
  }
  const mounts = info
    .split("\n")
    .map((l) => l.split(" ")[4])
    .filter((m) => m && (m === dir || m.startsWith(dir + "/")))
    .reverse();
  for (const m of mounts) {
    await run("umount", ["-l", m]).catch(() => {});
  }
}
