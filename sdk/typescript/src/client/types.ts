// What the API answers, as the runtime client types it (proto/openapi.yaml).

/** A run's lifecycle state. */
export type RunStatus = "QUEUED" | "STARTING" | "RUNNING" | "WAITING" | "COMPLETED" | "FAILED" | "TIMED_OUT" | "CANCELED";

/** A run (GET /v1/runs/{id} adds metadata and waitingOn). */
export interface Run {
  id: string;
  kind?: "task" | "build";
  project: string;
  env: string;
  taskId: string;
  deploymentId: string;
  deploymentVersion: number;
  status: RunStatus;
  payload: unknown;
  output?: unknown;
  error?: { class: string; message: string; stack?: string };
  idempotencyKey?: string;
  workspaceId?: string;
  workerId?: string;
  tier?: string;
  createdAt: string;
  startedAt?: string;
  finishedAt?: string;
  lastSeq: number;
  /** What the task set with ctx.metadata.set (retrieve only). */
  metadata?: Record<string, unknown>;
  /** The waitpoints a WAITING run waits on (retrieve only). */
  waitingOn?: Waitpoint[];
}

/** One page of runs, newest first. */
export interface RunPage {
  runs: Run[];
  nextCursor?: string;
}

/** A token, human wait or timer. */
export interface Waitpoint {
  id: string;
  project: string;
  env: string;
  runId?: string;
  kind: "human" | "token" | "timer";
  status: "WAITING" | "COMPLETED" | "TIMED_OUT" | "CANCELED";
  displayText?: string;
  tags: string[];
  idempotencyKey?: string;
  timeoutAt?: string;
  data?: unknown;
  reason?: string;
  createdAt: string;
  completedAt?: string;
  /** Only in the answer that created the token. */
  callbackUrl?: string;
}

/** One page of waitpoints. */
export interface WaitpointPage {
  waitpoints: Waitpoint[];
  nextCursor?: string;
}

/** One record of a run's session stream. */
export interface SessionRecord {
  runId: string;
  stream: "input" | "output";
  /** 1, 2, ... per stream: the SSE event id, the cursor to resume after. */
  seq: number;
  idempotencyKey?: string;
  time: string;
  data: unknown;
}

/** The project environment a call addresses (default: the client's). */
export interface Scope {
  project?: string;
  env?: string;
}
