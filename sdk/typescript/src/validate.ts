// Small checks shared by the builders. They throw at declaration time so that
// a mistake surfaces when the project is indexed, not when a run starts.

const namePattern = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** assertName checks an identifier such as a task id or an image name. */
export function assertName(what: string, name: unknown): asserts name is string {
  if (typeof name !== "string" || !namePattern.test(name)) {
    throw new TypeError(
      `${what} must be a non-empty string of letters, digits, ".", "_" or "-" (starting with a letter or digit), got ${describe(name)}`,
    );
  }
}

/** assertString checks that value is a non-empty string. */
export function assertString(what: string, value: unknown): asserts value is string {
  if (typeof value !== "string" || value === "") {
    throw new TypeError(`${what} must be a non-empty string, got ${describe(value)}`);
  }
}

/** assertAbsolutePath checks that value is an absolute POSIX path. */
export function assertAbsolutePath(what: string, value: unknown): asserts value is string {
  assertString(what, value);
  if (!value.startsWith("/")) {
    throw new TypeError(`${what} must be an absolute path, got ${describe(value)}`);
  }
}

/** describe renders a value for an error message. */
export function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (value === null || value === undefined) return String(value);
  if (typeof value === "function") return "a function";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  return String(value);
}
