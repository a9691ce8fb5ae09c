// The runtime client of @helmr/sdk: for code outside tasks (CI, services,
// scripts) that triggers runs, answers tokens, talks to a run's session and
// works in workspaces. Its types come from proto/openapi.yaml (gen/openapi.ts).

import { env } from "./globals.js";
import { Transport, type ClientOptions } from "./http.js";
import { Runs } from "./runs.js";
import { Schedules } from "./schedules.js";
import { Sessions } from "./sessions.js";
import { Tokens } from "./tokens.js";
import type { Scope } from "./types.js";
import { Workspaces } from "./workspaces.js";

export * from "./errors.js";
export type { ClientOptions } from "./http.js";
export type { ListRunsOptions, Runs, TriggerOptions } from "./runs.js";
export type { CreateScheduleOptions, ListSchedulesOptions, Schedules, UpdateScheduleOptions } from "./schedules.js";
export type { Sessions, SessionAppendOptions, SessionReadOptions } from "./sessions.js";
export type { CreateTokenOptions as CreateApiTokenOptions, ListTokensOptions, Tokens } from "./tokens.js";
export type { WorkspaceFiles } from "./files.js";
export type {
  DirEntry,
  DirListing,
  ExecOutput,
  ExecRequest,
  ExecResult,
  Operation,
  Run,
  RunPage,
  RunStatus,
  Schedule,
  SchedulePage,
  Scope,
  SessionRecord,
  Trajectory,
  Waitpoint,
  WaitpointPage,
  Workspace,
  WorkspaceList,
} from "./types.js";
export type { CreateWorkspaceOptions, ExecBytesResult, ExecEvent, ExecOptions, ListWorkspacesOptions, TrajectoryOptions, Workspaces } from "./workspaces.js";

/** Options of HelmrClient: where, with which credential, in which project environment. */
export interface HelmrClientOptions extends ClientOptions {
  /** The project calls address by default; default HELMR_PROJECT. */
  project?: string;
  /** The environment calls address by default; default HELMR_ENV, else "dev". */
  env?: string;
}

/**
 * HelmrClient calls the Helmr API with an API key (HELMR_URL and
 * HELMR_API_KEY by default). Errors are HelmrApiError subclasses, one per
 * status; 429 and 503 are retried after the server's Retry-After.
 */
export class HelmrClient {
  readonly runs: Runs;
  readonly tokens: Tokens;
  readonly schedules: Schedules;
  readonly sessions: Sessions;
  readonly workspaces: Workspaces;

  constructor(options: HelmrClientOptions = {}) {
    const t = new Transport(options);
    const project = options.project ?? env("HELMR_PROJECT");
    const environment = options.env ?? env("HELMR_ENV") ?? "dev";
    const scope = (s: Scope = {}) => {
      const p = s.project ?? project;
      if (p === undefined || p === "") throw new TypeError("@helmr/sdk: no project: pass { project } or set HELMR_PROJECT");
      return { project: p, env: s.env ?? environment };
    };
    this.runs = new Runs(t, scope);
    this.tokens = new Tokens(t, scope);
    this.schedules = new Schedules(t, scope);
    this.sessions = new Sessions(t);
    this.workspaces = new Workspaces(t, scope);
  }
}
