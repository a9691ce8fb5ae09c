import { Image } from "./image.js";
import type { ResourcesManifest, SandboxManifest } from "./manifest-types.js";
import { assertAbsolutePath, assertName, describe } from "./validate.js";

/** A memory size in binary units, for example "512Mi" or "4Gi". */
export type MemorySize = `${number}${"Ki" | "Mi" | "Gi" | "Ti"}`;

/**
 * The vCPUs and memory a sandbox requests, the size quota of the
 * workspaces made for it (disk, 8Mi to 16Ti; default: the worker's
 * HELMR_WORKSPACE_QUOTA), and the bound of what it writes to its root
 * outside the workspace (rootSize, 1Mi to 16Ti; default: the worker's
 * HELMR_ROOT_SIZE, 1Gi): the root is a copy-on-write layer over the
 * image, discarded with the sandbox; a write past the bound fails with
 * ENOSPC.
 */
export interface Resources {
  cpu?: number;
  memory?: MemorySize;
  disk?: MemorySize;
  rootSize?: MemorySize;
}

const memoryPattern = /^(?:\d+|\d*\.\d+)(?:Ki|Mi|Gi|Ti)$/;
const diskPattern = /^\d{1,15}(?:Ki|Mi|Gi|Ti)$/;

/**
 * A sandbox declaration: the Linux runtime shape of a task (image, workspace
 * mount, resources). Sandboxes are immutable; builder methods return a copy.
 */
export class Sandbox {
  readonly name: string;
  readonly #image: Image | undefined;
  readonly #workspace: string | undefined;
  readonly #resources: Readonly<Resources>;

  /** @internal Use sandbox(name). */
  constructor(name: string, img?: Image, workspace?: string, resources: Resources = {}) {
    this.name = name;
    this.#image = img;
    this.#workspace = workspace;
    this.#resources = resources;
  }

  /** image sets the sandbox's image. */
  image(img: Image): Sandbox {
    if (!(img instanceof Image)) {
      throw new TypeError(`sandbox "${this.name}" image must be an image(...), got ${describe(img)}`);
    }
    return new Sandbox(this.name, img, this.#workspace, this.#resources);
  }

  /** workspace sets where the workspace is mounted (default /workspace). */
  workspace(path: string): Sandbox {
    assertAbsolutePath(`sandbox "${this.name}" workspace`, path);
    const clean = path.length > 1 ? path.replace(/\/+$/, "") : path;
    if (clean === "/" || clean.split("/").includes("..")) {
      throw new TypeError(`sandbox "${this.name}" workspace ${JSON.stringify(path)} is not a usable mount path`);
    }
    // Reserved runtime paths (/dev, /proc, /sys, /run, /tmp, /opt/helmr) are
    // the runtime's policy: deploy validation refuses them, naming the task
    // and the field (sandbox.workspace).
    return new Sandbox(this.name, this.#image, clean, this.#resources);
  }

  /** resources sets the requested vCPUs and memory, the workspace disk size and the root size. */
  resources(resources: Resources): Sandbox {
    const { cpu, memory, disk, rootSize } = resources;
    if (cpu !== undefined && (typeof cpu !== "number" || !Number.isFinite(cpu) || cpu <= 0)) {
      throw new TypeError(`sandbox "${this.name}" cpu must be a positive number, got ${describe(cpu)}`);
    }
    if (memory !== undefined && (typeof memory !== "string" || !memoryPattern.test(memory))) {
      throw new TypeError(
        `sandbox "${this.name}" memory must be a size such as "512Mi" or "4Gi", got ${describe(memory)}`,
      );
    }
    if (disk !== undefined && (typeof disk !== "string" || !diskPattern.test(disk))) {
      throw new TypeError(
        `sandbox "${this.name}" disk must be a whole size such as "512Mi" or "20Gi", got ${describe(disk)}`,
      );
    }
    if (rootSize !== undefined && (typeof rootSize !== "string" || !diskPattern.test(rootSize))) {
      throw new TypeError(
        `sandbox "${this.name}" rootSize must be a whole size such as "512Mi" or "2Gi", got ${describe(rootSize)}`,
      );
    }
    const copy: Resources = {};
    if (cpu !== undefined) copy.cpu = cpu;
    if (memory !== undefined) copy.memory = memory;
    if (disk !== undefined) copy.disk = disk;
    if (rootSize !== undefined) copy.rootSize = rootSize;
    return new Sandbox(this.name, this.#image, this.#workspace, Object.freeze(copy));
  }

  /** toManifest serializes the sandbox; it fails if no image was set. */
  toManifest(): SandboxManifest {
    if (this.#image === undefined) {
      throw new Error(`sandbox "${this.name}" has no image: call .image(image(...))`);
    }
    const resources: ResourcesManifest = {};
    if (this.#resources.cpu !== undefined) resources.cpu = this.#resources.cpu;
    if (this.#resources.memory !== undefined) resources.memory = this.#resources.memory;
    if (this.#resources.disk !== undefined) resources.disk = this.#resources.disk;
    if (this.#resources.rootSize !== undefined) resources.rootSize = this.#resources.rootSize;
    return {
      name: this.name,
      image: this.#image.toManifest(),
      ...(this.#workspace !== undefined ? { workspace: this.#workspace } : {}),
      resources,
    } satisfies SandboxManifest;
  }
}

/** sandbox declares a named sandbox; chain .image(...), .workspace(...), .resources(...). */
export function sandbox(name: string): Sandbox {
  assertName("sandbox name", name);
  return new Sandbox(name);
}
