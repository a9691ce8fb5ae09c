import { ConnectionError, errorOf } from "./errors.js";
import { WorkspaceFiles } from "./files.js";
import type { AbortSignalLike } from "./globals.js";
import type { Transport } from "./http.js";
import { dataOf, events } from "./sse.js";
import type { ExecOutput, ExecRequest, ExecResult, Scope, Trajectory, Workspace, WorkspaceList } from "./types.js";

/**
 * Options of workspaces.create: the sandbox the workspace is for, named by a
 * task that uses it or by its own name (exactly one of the two).
 */
export type CreateWorkspaceOptions = Scope & {
  /** Its size quota ("20Gi"); default: the sandbox's disk, else the worker's HELMR_WORKSPACE_QUOTA. */
  quota?: string;
} & ({ task: string; sandbox?: undefined } | { sandbox: string; task?: undefined });

/** Options of workspaces.list. */
export interface ListWorkspacesOptions extends Scope {
  limit?: number;
}

/** Options of workspaces.trajectory. */
export interface TrajectoryOptions {
  /** Read on after this operation's seq (the last one you saw). */
  after?: number;
  limit?: number;
}

/** Options of an exec. */
export interface ExecOptions {
  signal?: AbortSignalLike;
}

/** An exec's result with its output as bytes (execBytes). */
export type ExecBytesResult = Omit<ExecResult, "stdout" | "stderr"> & { stdout: Uint8Array; stderr: Uint8Array };

/** One event of a streaming exec: output as it is printed, then the result. */
export type ExecEvent = ({ type: "output" } & ExecOutput) | { type: "result"; result: ExecResult };

/**
 * Workspaces: make one for a deployed sandbox, run commands in it, read and
 * write its files (files), and read what was done in it (trajectory).
 * Commands and file operations are direct operations: they run in a sandbox
 * of the workspace's task on the worker that holds it, and a workspace that
 * a run holds answers them with a ConflictError.
 */
export class Workspaces {
  readonly #t: Transport;
  readonly #scope: (s?: Scope) => { project: string; env: string };
  /** The workspace's files: read, write, list a directory, tar. */
  readonly files: WorkspaceFiles;

  constructor(t: Transport, scope: (s?: Scope) => { project: string; env: string }) {
    this.#t = t;
    this.#scope = scope;
    this.files = new WorkspaceFiles(t);
  }

  /** create makes an empty workspace for a deployed sandbox (needs workspaces:manage). */
  create(options: CreateWorkspaceOptions): Promise<Workspace> {
    const { task, sandbox, quota } = options;
    if ((task === undefined) === (sandbox === undefined)) {
      throw new TypeError("@helmr/sdk: workspaces.create needs exactly one of task and sandbox");
    }
    return this.#t.call("POST", "/v1/workspaces", {
      query: this.#scope(options),
      body: { ...(task !== undefined ? { task } : { sandbox }), ...(quota !== undefined ? { quota } : {}) },
    });
  }

  /** retrieve returns a workspace; a deleted one has deletedAt (needs workspaces:read). */
  retrieve(id: string): Promise<Workspace> {
    return this.#t.call("GET", "/v1/workspaces/{id}", { path: { id }, idempotent: true });
  }

  /** list returns the live workspaces of the project environment, newest first (needs workspaces:read). */
  list(options: ListWorkspacesOptions = {}): Promise<WorkspaceList> {
    return this.#t.call("GET", "/v1/workspaces", { query: { ...this.#scope(options), limit: options.limit }, idempotent: true });
  }

  /** delete deletes a workspace and, on its worker, its files; one an unfinished run holds is a ConflictError (needs workspaces:manage). */
  async delete(id: string): Promise<void> {
    await this.#t.call("DELETE", "/v1/workspaces/{id}", { path: { id }, idempotent: true });
  }

  /**
   * exec runs one command in the workspace and answers how it ended and
   * what it printed (needs workspaces:exec). A command that fails is a
   * result with its exit code, not an error. Values of ${vault:NAME}
   * references in argv, command or env are filled in by the control plane
   * and redacted from the output.
   */
  exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    return this.#t.call("POST", "/v1/workspaces/{id}/exec", { path: { id }, body: request, ...signal(options) });
  }

  /**
   * execBytes is exec with the output as the bytes the command printed,
   * lossless (outputEncoding "base64" on the wire): text output turns
   * bytes that are not UTF-8 into U+FFFD. A cut stream ends with Helmr's
   * marker line, as in text (stdoutTruncated says so).
   */
  async execBytes(id: string, request: Omit<ExecRequest, "outputEncoding">, options: ExecOptions = {}): Promise<ExecBytesResult> {
    const res = await this.exec(id, { ...request, outputEncoding: "base64" }, options);
    if (res.outputEncoding !== "base64") {
      throw new ConnectionError(`exec in ${id}: the control plane answered text, not base64 (an older Helmr?)`);
    }
    return { ...res, stdout: fromBase64(res.stdout), stderr: fromBase64(res.stderr) };
  }

  /**
   * execStream is exec yielding the command's output as it prints it
   * (whole lines, redacted), then its result. An error the plain exec
   * would answer is thrown as the same HelmrApiError subclass.
   */
  async *execStream(id: string, request: ExecRequest, options: ExecOptions = {}): AsyncGenerator<ExecEvent> {
    const res = await this.#t.callRaw("POST", "/v1/workspaces/{id}/exec/stream", {
      path: { id },
      body: request,
      headers: { Accept: "text/event-stream" },
      ...signal(options),
    });
    if (res.body === null) throw new ConnectionError(`exec in ${id}: no body`);
    for await (const ev of events(res.body)) {
      if (ev.event === "output") {
        const out = dataOf("output", ev.data);
        yield { type: "output", stream: out.stream, data: out.data };
      } else if (ev.event === "result") {
        yield { type: "result", result: dataOf("result", ev.data) };
        return;
      } else if (ev.event === "error") {
        const e = dataOf("error", ev.data);
        throw errorOf(e.status, e.code, e.message);
      }
    }
    throw new ConnectionError(`exec in ${id}: the stream closed before the result`);
  }

  /** trajectory returns the workspace's direct operations after a cursor, oldest first (needs workspaces:read). */
  trajectory(id: string, options: TrajectoryOptions = {}): Promise<Trajectory> {
    return this.#t.call("GET", "/v1/workspaces/{id}/trajectory", {
      path: { id },
      query: { after: options.after, limit: options.limit },
      idempotent: true,
    });
  }
}

function signal(options: ExecOptions): { signal?: AbortSignalLike } {
  return options.signal ? { signal: options.signal } : {};
}

const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** fromBase64 decodes standard base64 (padded), as the API sends it. */
export function fromBase64(s: string): Uint8Array {
  if (s.length % 4 !== 0) throw new ConnectionError("a base64 output of a length not a multiple of 4");
  const pad = s.endsWith("==") ? 2 : s.endsWith("=") ? 1 : 0;
  const out = new Uint8Array((s.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < s.length; i += 4) {
    let n = 0;
    for (let j = 0; j < 4; j++) {
      const c = s[i + j]!;
      const v = c === "=" ? 0 : b64.indexOf(c);
      if (v < 0) throw new ConnectionError(`a base64 output holds ${JSON.stringify(c)}`);
      n = (n << 6) | v;
    }
    for (const shift of [16, 8, 0]) if (o < out.length) out[o++] = (n >> shift) & 0xff;
  }
  return out;
}
