import { inspect } from "node:util";

import type { ErrorMessage } from "./protocol.js";

/** A problem the adapter or index runner found before or around task code. */
export class AdapterError extends Error {
  override name = "AdapterError";
}

/** The task returned something that JSON cannot carry. */
export class OutputError extends Error {
  override name = "OutputError";
}

/** errorMessage turns any thrown value into the channel's error message. */
export function errorMessage(thrown: unknown): ErrorMessage {
  if (thrown instanceof Error) {
    return {
      type: "error",
      name: typeof thrown.name === "string" && thrown.name !== "" ? thrown.name : "Error",
      message: String(thrown.message),
      stack: typeof thrown.stack === "string" ? thrown.stack : "",
    };
  }
  return {
    type: "error",
    name: "NonErrorThrown",
    message: `task threw a non-Error value: ${inspect(thrown, { depth: 2, breakLength: Infinity })}`,
    stack: "",
  };
}

/** withPrefix returns thrown with its message prefixed, keeping name and stack. */
export function withPrefix(prefix: string, thrown: unknown): ErrorMessage {
  const m = errorMessage(thrown);
  return { ...m, message: `${prefix}: ${m.message}` };
}
