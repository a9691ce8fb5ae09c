// The plain-JSON shapes that indexing a task project produces. They mirror
// internal/deployments/manifest.go field for field; keep the two in step.

/** Where a declared secret appears inside the sandbox. Exactly one of env, file, directory is set. */
export interface SecretTargetManifest {
  env?: string;
  file?: string;
  directory?: string;
  files?: string[];
  /** Octal permission bits, for example "0400". */
  mode?: string;
  owner?: string;
  /** Egress binding: the hosts the value may be sent to; the sandbox holds a placeholder. */
  egress?: { hosts: string[]; body?: boolean };
}

/** A named persistent cache mounted into a run step. */
export interface CacheMountManifest {
  mountPath: string;
  cache: string;
}

/** A file or directory of the task project, relative to its root. */
export interface SourceManifest {
  type: "file" | "directory";
  path: string;
}

/** One image build step. */
export type StepManifest =
  | { kind: "from"; ref: string; credentials?: string }
  | { kind: "run"; argv: string[]; cache?: CacheMountManifest[]; secrets?: Record<string, { env?: string; file?: string }> }
  | { kind: "copy"; dest: string; source: SourceManifest; owner?: string; mode?: number }
  | { kind: "copyFrom"; image: ImageManifest; src: string; dest: string }
  | { kind: "workdir"; path: string }
  | { kind: "env"; key: string; value: string }
  | { kind: "user"; user: string };

/** An image declaration: ordered build steps. */
export interface ImageManifest {
  name: string;
  steps: StepManifest[];
}

/**
 * A sandbox's requested vCPUs and memory ("512Mi", "4Gi"), its workspaces' size quota ("20Gi")
 * and the bound of its writable root ("2Gi").
 */
export interface ResourcesManifest {
  cpu?: number;
  memory?: string;
  disk?: string;
  rootSize?: string;
}

/** A sandbox declaration. */
export interface SandboxManifest {
  name: string;
  image: ImageManifest;
  workspace?: string;
  resources: ResourcesManifest;
}

/** One task declaration as the deployment stores it. */
export interface TaskManifest {
  id: string;
  /** The bundle path that exports the task; filled in by the indexer. */
  module: string;
  /** The module's export name holding the task; filled in by the indexer. */
  export: string;
  /** Seconds; absent means the server default. */
  maxDuration?: number;
  secrets?: Record<string, SecretTargetManifest>;
  sandbox: SandboxManifest;
  hasRun: boolean;
  retry?: import("./flow.js").RetryManifest;
  queue?: { name: string; concurrencyLimit?: number };
  /** The payload's JSON Schema; the control plane refuses a payload that does not fit. */
  input?: Record<string, unknown>;
  /** A declarative cron schedule (schedules.task): deploying keeps it in step. */
  schedule?: ScheduleManifest;
}

/** A task's declared schedule: a cron expression in an IANA zone (default UTC). */
export interface ScheduleManifest {
  cron: string;
  timezone?: string;
}

/** What a task knows about itself: its manifest without module and export. */
export type TaskDeclaration = Omit<TaskManifest, "module" | "export">;

/** The project configuration (the default export of helmr.config.ts). */
export interface ConfigManifest {
  project: string;
  dirs: string[];
  retry?: import("./flow.js").RetryManifest;
}
