import { inspect } from "node:util";

import type { RunInfo } from "./protocol.js";

// The ctx a task's run receives. Its shape is @helmr/sdk's TaskContext; the
// runtime tests check that the two stay assignable.

type Attributes = Record<string, unknown>;

/** What the adapter passes to run as its second argument. */
export interface AdapterContext {
  run: RunInfo;
  logger: {
    info(message: string, attributes?: Attributes): void;
    warn(message: string, attributes?: Attributes): void;
    error(message: string, attributes?: Attributes): void;
  };
  wait: {
    human(options: unknown): Promise<never>;
    createToken(options?: unknown): Promise<never>;
    forToken(token: unknown, options?: unknown): Promise<never>;
    for(duration: unknown): Promise<never>;
    until(date: unknown): Promise<never>;
  };
}

/** createContext builds ctx for one run. */
export function createContext(run: RunInfo): AdapterContext {
  return {
    run: Object.freeze({ ...run }),
    logger: Object.freeze({
      info: (message: string, attributes?: Attributes) => console.log(logLine(message, attributes)),
      warn: (message: string, attributes?: Attributes) => console.warn(logLine(message, attributes)),
      error: (message: string, attributes?: Attributes) => console.error(logLine(message, attributes)),
    }),
    wait: Object.freeze({
      human: () => unsupported("human"),
      createToken: () => unsupported("createToken"),
      forToken: () => unsupported("forToken"),
      for: () => unsupported("for"),
      until: () => unsupported("until"),
    }),
  };
}

// Waits need the control plane's waitpoints, which this version lacks. They
// reject instead of resolving so a task never proceeds without its answer.
function unsupported(method: string): Promise<never> {
  return Promise.reject(new Error(`ctx.wait.${method} is not supported by this Helmr version yet`));
}

function logLine(message: string, attributes?: Attributes): string {
  const text = String(message);
  if (attributes === undefined || Object.keys(attributes).length === 0) return text;
  try {
    return `${text} ${JSON.stringify(attributes)}`;
  } catch {
    return `${text} ${inspect(attributes, { depth: 4, breakLength: Infinity })}`;
  }
}
