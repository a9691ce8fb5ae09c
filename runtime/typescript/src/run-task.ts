import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { createContext, settle, type Requester } from "./context.js";
import { AdapterError, OutputError, errorMessage, withPrefix } from "./errors.js";
import type { StartMessage } from "./protocol.js";
import { brandProblem, hasBrand } from "./task-brand.js";
import { installTasks } from "./tasks.js";

/** moduleURL turns a module path (absolute, relative to cwd, or a file: URL) into an import specifier. */
export function moduleURL(module: string): string {
  if (module.startsWith("file:")) return module;
  return pathToFileURL(isAbsolute(module) ? module : resolve(module)).href;
}

/**
 * runTask imports the start message's module, runs the task's run function
 * and returns the one line (JSON, without newline) to send back: a result or
 * an error message. It never throws. request carries ctx.wait.* to the
 * worker.
 */
export async function runTask(start: StartMessage, request?: Requester): Promise<string> {
  let exports: Record<string, unknown>;
  try {
    exports = (await import(moduleURL(start.module))) as Record<string, unknown>;
  } catch (err) {
    return JSON.stringify(withPrefix(`import ${start.module}`, err));
  }

  const where = `export "${start.export}" of ${start.module}`;
  if (!Object.hasOwn(exports, start.export)) {
    const names = Object.keys(exports).join(", ") || "none";
    return failure(new AdapterError(`${start.module} has no export "${start.export}" (exports: ${names})`));
  }
  const value = exports[start.export];
  if (!hasBrand(value)) {
    return failure(new AdapterError(`${where} is not a Helmr task: declare it with task({ ... }) from @helmr/sdk`));
  }
  const problem = brandProblem(value);
  if (problem !== undefined) return failure(new AdapterError(`${where} cannot run: ${problem}`));
  const run = value.run;
  if (typeof run !== "function") {
    return failure(
      new AdapterError(`task "${String(value.id)}" (${where}) has no run function: add run to its task({ ... }) declaration`),
    );
  }

  let output: unknown;
  const ctx = createContext(start.run, request);
  installTasks(
    request ?? ((method) => Promise.reject(new Error(`${method} needs the Helmr worker: this adapter has no channel`))),
  );
  try {
    output = await run.call(value, start.payload, ctx);
  } catch (err) {
    await settle(ctx);
    return failure(err);
  }
  await settle(ctx); // output appended without await is stored before the run ends
  return resultLine(start.run.taskId, output);
}

/** resultLine serializes a result message, or an OutputError if output is not JSON. */
export function resultLine(taskId: string, output: unknown): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(output);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    return failure(new OutputError(`task "${taskId}" returned a value that is not JSON-serializable: ${reason}`));
  }
  if (json === undefined && output !== undefined) {
    return failure(
      new OutputError(`task "${taskId}" returned a value that is not JSON-serializable: a ${typeof output} has no JSON form`),
    );
  }
  return `{"type":"result","output":${json ?? "null"}}`;
}

function failure(thrown: unknown): string {
  return JSON.stringify(errorMessage(thrown));
}
