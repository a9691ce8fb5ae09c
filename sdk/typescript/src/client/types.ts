// What the API answers, as the runtime client types it: named after the
// document's schemas (proto/openapi.yaml, generated into gen/openapi.ts), never
// written by hand.

import type { Answer, Schemas } from "./api.js";

/** A run's lifecycle state. */
export type RunStatus = Schemas["Status"];

/** A run (GET /v1/runs/{id} adds metadata and waitingOn). */
export type Run = Schemas["Run"];

/** One page of runs, newest first. */
export type RunPage = Answer<"GET", "/v1/runs">;

/** What a replay changes of its original (absent fields keep the original's). */
export type ReplayOverrides = Schemas["ReplayOverrides"];

/** Selects the runs of a project environment a bulk action applies to. */
export type BulkFilter = Schemas["BulkFilter"];

/** What a bulk action did: runs matched, counts by action, each run's action, and whether more match. */
export type BulkResult = Schemas["BulkResult"];

/** A token, human wait or timer. */
export type Waitpoint = Schemas["Waitpoint"];

/** One page of waitpoints. */
export type WaitpointPage = Answer<"GET", "/v1/tokens">;

/** One record of a run's session stream; seq (1, 2, ... per stream) is the SSE event id, the cursor to resume after. */
export type SessionRecord = Schemas["Record"];

/** A workspace: the files a task's sandbox works on, kept between runs and direct operations. */
export type Workspace = Schemas["Workspace"];

/** A project environment's live workspaces, newest first. */
export type WorkspaceList = Answer<"GET", "/v1/workspaces">;

/** A command to run in a workspace: argv (run as is) or command (run with /bin/sh -c). */
export type ExecRequest = Schemas["ExecRequest"];

/** How a command ended and what it printed. */
export type ExecResult = Schemas["ExecResult"];

/** Whole lines a streaming exec printed, as they came. */
export type ExecOutput = Schemas["ExecOutput"];

/** A directory of a workspace. */
export type DirListing = Schemas["DirListing"];

/** One entry of a DirListing. */
export type DirEntry = Schemas["DirEntry"];

/** A page of a workspace's trajectory, oldest operation first. */
export type Trajectory = Schemas["Trajectory"];

/** One direct operation in a workspace's trajectory. */
export type Operation = Schemas["Operation"];

/** The project environment a call addresses (default: the client's). */
export interface Scope {
  project?: string;
  env?: string;
}

/** A cron schedule of a task. */
export type Schedule = Schemas["Schedule"];

/** One page of schedules, newest first. */
export type SchedulePage = Answer<"GET", "/v1/schedules">;
