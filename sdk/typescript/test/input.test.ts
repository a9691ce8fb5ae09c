import assert from "node:assert/strict";
import { describe, it } from "node:test";

import * as z from "zod";

import {
  image,
  sandbox,
  task,
  TaskInputError,
  withJsonSchema,
  type StandardSchemaV1,
  type TaskContext,
  type TaskPayload,
} from "../src/index.js";
import { taskManifests } from "../src/manifest.js";

const sb = sandbox("s").image(image("i").from("node:24"));
const ctx = {} as TaskContext;

/** Equal is true when A and B are the same type; a failed check does not compile. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<T extends true>(_: T): void {}

function manifestOf(t: unknown) {
  const [m] = taskManifests({ t }, "bundles/t.js");
  assert.ok(m);
  return m;
}

const reviewSchema = {
  type: "object",
  properties: {
    repo: { type: "string", description: "owner/name" },
    pr: { type: "integer" },
    draft: { type: "boolean" },
    labels: { type: "array", items: { type: "string" } },
    mode: { enum: ["fast", "thorough"] },
  },
  required: ["repo", "pr"],
} as const;

/**
 * A Standard Schema validator written by hand: { repo: string, depth?:
 * number } whose depth defaults to 1, with a Standard JSON Schema export.
 */
interface RepoIn {
  repo: string;
  depth?: number;
}
interface RepoOut {
  repo: string;
  depth: number;
}
function repoValidator(withExport: boolean): StandardSchemaV1<RepoIn, RepoOut> {
  const json = { type: "object", properties: { repo: { type: "string" }, depth: { type: "integer" } }, required: ["repo"] };
  return {
    "~standard": {
      version: 1,
      vendor: "by-hand",
      validate(value) {
        const v = value as Partial<RepoIn> | null;
        if (typeof v !== "object" || v === null) return { issues: [{ message: "expected an object" }] };
        const issues: StandardSchemaV1.Issue[] = [];
        if (typeof v.repo !== "string") issues.push({ message: "expected a string", path: ["repo"] });
        if (v.depth !== undefined && !Number.isInteger(v.depth)) issues.push({ message: "expected an integer", path: [{ key: "depth" }] });
        if (issues.length > 0) return { issues };
        return { value: { repo: v.repo as string, depth: v.depth ?? 1 } };
      },
      ...(withExport ? { jsonSchema: { input: () => json } } : {}),
    },
  };
}

describe("task input: JSON Schema", () => {
  it("lands in the manifest as given", () => {
    const t = task({ id: "review", sandbox: sb, input: reviewSchema, run: (p) => p.repo });
    assert.deepStrictEqual(manifestOf(t).input, reviewSchema);
  });

  it("types run's payload from the schema literal", () => {
    const t = task({
      id: "review",
      sandbox: sb,
      input: reviewSchema,
      run: (payload) => {
        expectType<
          Equal<
            typeof payload,
            { repo: string; pr: number; draft?: boolean; labels?: string[]; mode?: "fast" | "thorough" }
          >
        >(true);
        return payload.pr;
      },
    });
    expectType<Equal<TaskPayload<typeof t>, { repo: string; pr: number; draft?: boolean; labels?: string[]; mode?: "fast" | "thorough" }>>(true);
  });

  it("types an inline literal without as const", () => {
    task({
      id: "inline",
      sandbox: sb,
      input: { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
      run: (payload) => {
        expectType<Equal<typeof payload, { n: number }>>(true);
        return payload.n + 1;
      },
    });
  });

  it("takes an explicit payload type instead", () => {
    const schema: Record<string, unknown> = { type: "object" };
    const t = task<{ repo: string }>({ id: "explicit", sandbox: sb, input: schema, run: (p) => p.repo });
    expectType<Equal<TaskPayload<typeof t>, { repo: string }>>(true);
    assert.deepStrictEqual(manifestOf(t).input, { type: "object" });
  });

  it("passes the payload to run unchanged (the control plane checked it)", async () => {
    const t = task({ id: "review", sandbox: sb, input: reviewSchema, run: (p) => p });
    assert.deepStrictEqual(await t.run?.({ repo: "a", pr: 1 }, ctx), { repo: "a", pr: 1 });
  });

  it("refuses what is not a schema, naming the task", () => {
    for (const bad of ["string", 3, null, [{ type: "string" }]]) {
      assert.throws(
        () => task({ id: "bad", sandbox: sb, input: bad as never, run: () => 1 }),
        (e: Error) => e instanceof TypeError && e.message.includes('task "bad" input') && e.message.includes("JSON Schema"),
      );
    }
  });

  it("refuses a schema that is not JSON", () => {
    const cyclic: Record<string, unknown> = { type: "object" };
    cyclic.self = cyclic;
    assert.throws(() => task({ id: "cyc", sandbox: sb, input: cyclic, run: () => 1 }), /task "cyc" input is not JSON/);
  });

  it("a task without input has none in its manifest", () => {
    assert.equal(manifestOf(task({ id: "free", sandbox: sb, run: () => 1 })).input, undefined);
  });
});

describe("task input: Standard Schema", () => {
  it("lands in the manifest as its Standard JSON Schema export", () => {
    const t = task({ id: "repo", sandbox: sb, input: repoValidator(true), run: (p) => p.depth });
    assert.deepStrictEqual(manifestOf(t).input, {
      type: "object",
      properties: { repo: { type: "string" }, depth: { type: "integer" } },
      required: ["repo"],
    });
  });

  it("types run's payload as the output and the trigger's as the input", () => {
    const t = task({
      id: "repo",
      sandbox: sb,
      input: repoValidator(true),
      run: (payload) => {
        expectType<Equal<typeof payload, RepoOut>>(true);
        return payload.depth * 2;
      },
    });
    expectType<Equal<TaskPayload<typeof t>, RepoIn>>(true);
  });

  it("parses the payload before run: defaults apply, bad payloads throw with paths", async () => {
    const seen: unknown[] = [];
    const t = task({ id: "repo", sandbox: sb, input: repoValidator(true), run: (p) => { seen.push(p); return p.depth; } });
    assert.equal(await t.run?.({ repo: "a" }, ctx), 1);
    assert.deepStrictEqual(seen, [{ repo: "a", depth: 1 }]);
    await assert.rejects(async () => t.run!({ depth: 1.5 } as never, ctx), (e: unknown) => {
      assert.ok(e instanceof TaskInputError);
      assert.equal(e.name, "TaskInputError");
      assert.deepStrictEqual(e.issues, [
        { path: "payload.repo", message: "expected a string" },
        { path: "payload.depth", message: "expected an integer" },
      ]);
      assert.match(e.message, /task "repo": the payload does not fit its input: payload\.repo: expected a string/);
      return true;
    });
    assert.equal(seen.length, 1, "run was called with a bad payload");
  });

  it("fails the deploy without a JSON Schema export, saying how to give one", () => {
    assert.throws(
      () => task({ id: "noexport", sandbox: sb, input: repoValidator(false), run: () => 1 }),
      (e: Error) =>
        e instanceof TypeError &&
        e.message.includes('task "noexport" input') &&
        e.message.includes("by-hand schema has no JSON Schema export") &&
        e.message.includes("withJsonSchema"),
    );
  });

  it("withJsonSchema gives a validator its JSON Schema and keeps validating", async () => {
    const t = task({
      id: "paired",
      sandbox: sb,
      input: withJsonSchema(repoValidator(false), { type: "object", required: ["repo"] }),
      run: (p) => {
        expectType<Equal<typeof p, RepoOut>>(true);
        return p.depth;
      },
    });
    assert.deepStrictEqual(manifestOf(t).input, { type: "object", required: ["repo"] });
    assert.equal(await t.run?.({ repo: "x", depth: 4 }, ctx), 4);
    await assert.rejects(async () => t.run!({} as never, ctx), TaskInputError);
  });

  it("accepts a validator that is a function (as arktype's types are)", () => {
    const fn = Object.assign(() => undefined, repoValidator(true));
    assert.deepStrictEqual(manifestOf(task({ id: "fn", sandbox: sb, input: fn, run: () => 1 })).input?.required, ["repo"]);
  });

  it("uses toJsonSchema() where the validator has it", () => {
    const v = Object.assign(repoValidator(false), { toJsonSchema: () => ({ type: "object", title: "from toJsonSchema" }) });
    assert.equal(manifestOf(task({ id: "ark", sandbox: sb, input: v, run: () => 1 })).input?.title, "from toJsonSchema");
  });

  it("names the task when the export throws", () => {
    const v = repoValidator(false);
    const broken = { "~standard": { ...v["~standard"], jsonSchema: { input: () => { throw new Error("cannot represent Date"); } } } };
    assert.throws(
      () => task({ id: "dates", sandbox: sb, input: broken, run: () => 1 }),
      /task "dates" input: the by-hand schema's JSON Schema export \(~standard.jsonSchema.input\) failed: cannot represent Date/,
    );
  });
});

describe("task input: zod", () => {
  const schema = z.object({ repo: z.string().min(1), depth: z.number().int().default(3), tags: z.array(z.string()).optional() });

  it("lands in the manifest as the JSON Schema of what it accepts", () => {
    const t = task({ id: "zod", sandbox: sb, input: schema, run: (p) => p.depth });
    const input = manifestOf(t).input as { required?: string[]; properties?: Record<string, unknown> };
    assert.deepStrictEqual(input.required, ["repo"], "a defaulted field is optional in what is accepted");
    assert.deepStrictEqual(Object.keys(input.properties ?? {}).sort(), ["depth", "repo", "tags"]);
  });

  it("types run's payload with defaults applied and parses before run", async () => {
    const t = task({
      id: "zod",
      sandbox: sb,
      input: schema,
      run: (payload) => {
        expectType<Equal<typeof payload, { repo: string; depth: number; tags?: string[] | undefined }>>(true);
        return payload;
      },
    });
    expectType<Equal<TaskPayload<typeof t>, { repo: string; depth?: number | undefined; tags?: string[] | undefined }>>(true);
    assert.deepStrictEqual(await t.run?.({ repo: "a" }, ctx), { repo: "a", depth: 3 });
    await assert.rejects(async () => t.run!({ repo: "" }, ctx), (e: unknown) => e instanceof TaskInputError && e.issues[0]?.path === "payload.repo");
  });

  it("fails the deploy for what JSON Schema cannot describe", () => {
    assert.throws(
      () => task({ id: "when", sandbox: sb, input: z.object({ at: z.date() }), run: () => 1 }),
      /task "when" input: the zod schema's JSON Schema export .* failed/,
    );
  });
});
