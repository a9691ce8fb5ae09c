// A task's declared input: a JSON Schema object, or a validator that
// implements Standard Schema (zod, valibot, arktype, ...). The manifest
// carries it as JSON Schema, which the control plane checks payloads
// against at trigger; a Standard Schema validator also runs in the guest,
// before run, so its transforms and defaults apply.

import { describe } from "./validate.js";

/**
 * The Standard Schema interface (https://standardschema.dev), version 1:
 * what zod, valibot, arktype and others implement. Types only: Helmr
 * calls `~standard.validate` and reads `~standard.jsonSchema` if present.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": StandardSchemaV1.Props<Input, Output>;
}

export declare namespace StandardSchemaV1 {
  export interface Props<Input = unknown, Output = Input> {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => Result<Output> | Promise<Result<Output>>;
    readonly types?: Types<Input, Output> | undefined;
    /** Standard JSON Schema: the validator's JSON Schema export, where it has one. */
    readonly jsonSchema?: JsonSchemaConverter | undefined;
  }
  export type Result<Output> = SuccessResult<Output> | FailureResult;
  export interface SuccessResult<Output> {
    readonly value: Output;
    readonly issues?: undefined;
  }
  export interface FailureResult {
    readonly issues: ReadonlyArray<Issue>;
  }
  export interface Issue {
    readonly message: string;
    readonly path?: ReadonlyArray<PropertyKey | PathSegment> | undefined;
  }
  export interface PathSegment {
    readonly key: PropertyKey;
  }
  export interface Types<Input = unknown, Output = Input> {
    readonly input: Input;
    readonly output: Output;
  }
  /** Standard JSON Schema's converter: input() is the schema of what the validator accepts. */
  export interface JsonSchemaConverter {
    readonly input: (options: { readonly target: string }) => Record<string, unknown>;
    readonly output?: (options: { readonly target: string }) => Record<string, unknown>;
  }
  export type InferInput<Schema extends StandardSchemaV1> = NonNullable<Schema["~standard"]["types"]>["input"];
  export type InferOutput<Schema extends StandardSchemaV1> = NonNullable<Schema["~standard"]["types"]>["output"];
}

/** A JSON Schema object describing a task's payload. */
export type InputJsonSchema = { readonly [keyword: string]: unknown };

/** What task({ input }) takes. */
export type TaskInput = InputJsonSchema | StandardSchemaV1;

/**
 * FromSchema is the payload type a JSON Schema literal describes, for the
 * common keywords: type (string, number, integer, boolean, null, array with
 * items, object with properties and required), enum and const. Anything
 * else is unknown; pass task's type parameter instead.
 */
export type FromSchema<S> = S extends { readonly const: infer C }
  ? C
  : S extends { readonly enum: readonly (infer E)[] }
    ? E
    : S extends { readonly type: infer T }
      ? T extends readonly (infer U)[]
        ? FromType<U, S>
        : FromType<T, S>
      : unknown;

type FromType<T, S> = T extends "string"
  ? string
  : T extends "number" | "integer"
    ? number
    : T extends "boolean"
      ? boolean
      : T extends "null"
        ? null
        : T extends "array"
          ? S extends { readonly items: infer I }
            ? FromSchema<I>[]
            : unknown[]
          : T extends "object"
            ? FromObject<S>
            : unknown;

type RequiredOf<S> = S extends { readonly required: readonly (infer R)[] } ? R : never;

type FromObject<S> = S extends { readonly properties: infer P }
  ? Flatten<
      { -readonly [K in keyof P as K extends RequiredOf<S> ? K : never]: FromSchema<P[K]> } & {
        -readonly [K in keyof P as K extends RequiredOf<S> ? never : K]?: FromSchema<P[K]>;
      }
    >
  : Record<string, unknown>;

type Flatten<T> = { [K in keyof T]: T[K] };

/** The payload a task's run receives for an input: the validator's output, or the JSON Schema's type. */
export type InputPayload<I> = I extends StandardSchemaV1 ? StandardSchemaV1.InferOutput<I> : FromSchema<I>;

/** TaskInputError: a payload the task's input validator refused, in the guest. */
export class TaskInputError extends Error {
  override name = "TaskInputError";
  /** The validator's issues, each with its path as the control plane writes it ("payload.repo"). */
  readonly issues: ReadonlyArray<{ path: string; message: string }>;

  constructor(taskId: string, issues: ReadonlyArray<{ path: string; message: string }>) {
    super(`task "${taskId}": the payload does not fit its input: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`);
    this.issues = issues;
  }
}

/** isStandardSchema reports whether value implements Standard Schema (functions count: arktype's types are). */
export function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  if ((typeof value !== "object" && typeof value !== "function") || value === null) return false;
  const std = (value as { "~standard"?: unknown })["~standard"];
  return typeof std === "object" && std !== null && typeof (std as { validate?: unknown }).validate === "function";
}

/**
 * withJsonSchema pairs a Standard Schema validator with its JSON Schema,
 * for validators that cannot export one themselves (valibot's export is
 * a separate package: withJsonSchema(schema, toJsonSchema(schema))).
 */
export function withJsonSchema<S extends StandardSchemaV1>(
  schema: S,
  jsonSchema: InputJsonSchema,
): StandardSchemaV1<StandardSchemaV1.InferInput<S>, StandardSchemaV1.InferOutput<S>> {
  if (!isStandardSchema(schema)) {
    throw new TypeError(`withJsonSchema needs a Standard Schema validator, got ${describe(schema)}`);
  }
  const json = plainJson("withJsonSchema's JSON Schema", jsonSchema);
  const std = schema["~standard"];
  return {
    "~standard": {
      version: std.version,
      vendor: std.vendor,
      validate: (value: unknown) => std.validate(value),
      ...(std.types ? { types: std.types } : {}),
      jsonSchema: { input: () => json, output: () => json },
    },
  };
}

/** A task's input, resolved: its JSON Schema, and the guest-side parse for a validator. */
export interface ResolvedInput {
  jsonSchema: Record<string, unknown>;
  parse?: (payload: unknown) => Promise<unknown>;
}

/**
 * resolveInput turns task({ input }) into the manifest's JSON Schema and,
 * for a Standard Schema validator, the parse to run before run. It throws
 * (failing the deploy) when the input is neither, or when a validator
 * offers no JSON Schema export.
 */
export function resolveInput(taskId: string, input: unknown): ResolvedInput {
  const what = `task "${taskId}" input`;
  if (isStandardSchema(input)) {
    const std = input["~standard"];
    const exported = exportJsonSchema(what, input);
    return {
      jsonSchema: plainJson(`${what} (the ${std.vendor} schema's JSON Schema export)`, exported),
      parse: async (payload) => {
        const result = await std.validate(payload);
        if (result.issues) {
          throw new TaskInputError(
            taskId,
            result.issues.map((i) => ({ path: issuePath(i.path), message: i.message })),
          );
        }
        return result.value;
      },
    };
  }
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw new TypeError(`${what} must be a JSON Schema object or a Standard Schema validator (zod, valibot, arktype), got ${describe(input)}`);
  }
  return { jsonSchema: plainJson(what, input) };
}

type Exporter = (options?: unknown) => unknown;

/** exportJsonSchema asks a validator for the JSON Schema of what it accepts. */
function exportJsonSchema(what: string, schema: StandardSchemaV1): unknown {
  const std = schema["~standard"];
  const own = schema as unknown as { toJSONSchema?: Exporter; toJsonSchema?: Exporter };
  const attempt = (how: string, fn: () => unknown): unknown => {
    try {
      return fn();
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      throw new TypeError(`${what}: the ${std.vendor} schema's JSON Schema export (${how}) failed: ${reason}`);
    }
  };
  if (typeof std.jsonSchema?.input === "function") {
    return attempt("~standard.jsonSchema.input", () => std.jsonSchema!.input({ target: "draft-2020-12" }));
  }
  if (typeof own.toJSONSchema === "function") {
    // zod 4: io "input" describes what is accepted (defaults optional).
    return attempt("toJSONSchema()", () => own.toJSONSchema!({ io: "input", target: "draft-2020-12" }));
  }
  if (typeof own.toJsonSchema === "function") {
    return attempt("toJsonSchema()", () => own.toJsonSchema!());
  }
  throw new TypeError(
    `${what}: the ${std.vendor} schema has no JSON Schema export (~standard.jsonSchema, toJSONSchema() or toJsonSchema()), ` +
      "and Helmr checks payloads at trigger against JSON Schema: pass input: withJsonSchema(schema, jsonSchema) " +
      "with its JSON Schema (valibot: toJsonSchema from @valibot/to-json-schema), or a JSON Schema object",
  );
}

/** plainJson checks value is a JSON object and returns a copy of it. */
function plainJson(what: string, value: unknown): Record<string, unknown> {
  let copy: unknown;
  try {
    copy = JSON.parse(JSON.stringify(value) ?? "null");
  } catch (err) {
    throw new TypeError(`${what} is not JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (typeof copy !== "object" || copy === null || Array.isArray(copy)) {
    throw new TypeError(`${what} must be a JSON Schema object, got ${describe(value)}`);
  }
  return copy as Record<string, unknown>;
}

/** issuePath writes a Standard Schema issue's path as the control plane does: payload.repo, payload.files[2]. */
export function issuePath(path: StandardSchemaV1.Issue["path"]): string {
  let out = "payload";
  for (const seg of path ?? []) {
    const key = typeof seg === "object" && seg !== null ? seg.key : seg;
    if (typeof key === "number") out += `[${key}]`;
    else if (typeof key === "string" && /^[A-Za-z_$-][A-Za-z0-9_$-]*$/.test(key)) out += `.${key}`;
    else out += `[${JSON.stringify(String(key))}]`;
  }
  return out;
}
