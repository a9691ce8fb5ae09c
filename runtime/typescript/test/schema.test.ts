import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Duplex, PassThrough } from "node:stream";
import { describe, it } from "node:test";

import type { Ajv2020 } from "../../../sdk/typescript/node_modules/ajv/dist/2020.js";
import { Channel, RequestError } from "../src/channel.js";
import { createContext, type AdapterContext, type Requester } from "../src/context.js";
import { errorMessage } from "../src/errors.js";
import { messageTypes, methods, parseStart, type Method, type MethodParams } from "../src/protocol.js";
import { resultLine } from "../src/run-task.js";
import { createTasks, type AdapterTasks } from "../src/tasks.js";
import { buildSrc } from "./helpers.js";

// The channel's schema and goldens (proto/), checked against this side's
// encodings; internal/agent/channel checks the worker's.

const root = join(buildSrc, "..", "..", "..", "..", "..", ".."); // .build/runtime/typescript/src → the repository
const schema = JSON.parse(readFileSync(join(root, "proto", "adapter-channel.schema.json"), "utf8")) as { $id: string; $defs: Record<string, unknown> };
type Msg = Record<string, unknown> & { type: string; id?: number; params?: unknown; result?: unknown };
const goldens = JSON.parse(readFileSync(join(root, "proto", "adapter-channel.golden.json"), "utf8")) as Record<string, Msg[]>;

// ajv is a dev dependency of sdk/typescript, whose node_modules the runtime's tests use.
const Ajv = (createRequire(join(root, "sdk", "typescript", "package.json"))("ajv/dist/2020") as { default: typeof Ajv2020 }).default;
// strictRequired would refuse the usual "exactly one of" idiom (oneOf of requireds).
const ajv = new Ajv({ strict: true, strictRequired: false, allErrors: true, formats: { "date-time": /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/ } });
ajv.addSchema(schema);

/** valid asserts msg is valid against the schema's definition def ("" for the schema). */
function valid(def: string, msg: unknown, what: string): void {
  const validate = ajv.getSchema(def === "" ? schema.$id : `${schema.$id}#/$defs/${def}`);
  assert.ok(validate, `no schema definition ${def}`);
  assert.ok(validate(msg), `${what}: ${JSON.stringify(msg)} is not valid against ${def || "the schema"}: ${ajv.errorsText(validate.errors)}`);
}

/** An adapter side of a channel whose requests the test reads and answers. */
function wire(): { ctx: Ctx; sent: Promise<Msg>; answer(msg: Msg): void } {
  const toAdapter = new PassThrough();
  const fromAdapter = new PassThrough();
  const channel = new Channel(Duplex.from({ readable: toAdapter, writable: fromAdapter }));
  const sent = new Promise<Msg>((resolve) => fromAdapter.once("data", (d: Buffer) => resolve(JSON.parse(d.toString("utf8")) as Msg)));
  const request: Requester = (method, params) => channel.request(method, params);
  const ctx = Object.assign(Object.create(createContext({ id: "run_1", taskId: "t" }, request)) as AdapterContext, { tasks: createTasks(request) });
  return { ctx, sent, answer: (msg) => toAdapter.write(`${JSON.stringify(msg)}\n`) };
}

/**
 * calls makes, through ctx, the request of each method with the given
 * params, and returns what ctx answers. Typed by MethodParams: a method
 * without an entry here does not compile.
 */
/** ctx with the run's tasks.* beside it. */
type Ctx = AdapterContext & { tasks: AdapterTasks };

const calls: { [M in Method]: (ctx: Ctx, p: MethodParams[M]) => Promise<unknown> } = {
  "wait.human": (ctx, p) =>
    ctx.wait.human.result({ displayText: p.displayText, ...(p.timeoutSeconds !== undefined ? { timeout: { seconds: p.timeoutSeconds } } : {}), ...(p.schema ? { schema: p.schema } : {}) }),
  "wait.createToken": (ctx, p) =>
    ctx.wait.createToken({
      ...(p.timeoutSeconds !== undefined ? { timeout: { seconds: p.timeoutSeconds } } : {}),
      ...(p.idempotencyKey !== undefined ? { idempotencyKey: p.idempotencyKey } : {}),
      ...(p.tags !== undefined ? { tags: p.tags } : {}),
    }),
  "wait.forToken": (ctx, p) => ctx.wait.forToken(p.token, p.timeoutSeconds !== undefined ? { timeout: { seconds: p.timeoutSeconds } } : {}),
  "wait.for": (ctx, p) => ctx.wait.for({ seconds: p.seconds }),
  "wait.until": (ctx, p) => ctx.wait.until(new Date(p.until)),
  "session.input.next": async (ctx, p) => {
    assert.equal(p.after, 0, "a first read starts after 0");
    return (await ctx.session.input[Symbol.asyncIterator]().next()).value;
  },
  "session.output.append": (ctx, p) => ctx.session.output.append(p.data, { idempotencyKey: p.id }),
  "metadata.set": (ctx, p) => ctx.metadata.set(p.key, p.value),
  "tasks.trigger": (ctx, p) =>
    p.items.length === 1
      ? ctx.tasks.trigger(p.items[0]!.taskId, p.items[0]!.payload, p.items[0]!.options).then((h) => ({ runs: [h] }))
      : ctx.tasks.batchTrigger(p.items[0]!.taskId, p.items),
  "tasks.triggerAndWait": (ctx, p) =>
    ctx.tasks.batchTriggerAndWait(p.items[0]!.taskId, p.items).then(
      (r) => r.runs,
      (err: Error) => ({ thrown: err.message }),
    ),
};

/** What ctx answers for each method's golden result. */
const answers: { [M in Method]: (result: unknown) => unknown } = {
  "wait.human": (r) => r,
  "wait.createToken": (r) => {
    const { id, url } = r as { id: string; url: string };
    return url === "" ? { id } : { id, url };
  },
  "wait.forToken": (r) => r,
  "wait.for": () => undefined,
  "wait.until": () => undefined,
  "session.input.next": (r) => (r as { records: Array<{ data: unknown }> }).records[0]?.data,
  "session.output.append": (r) => r,
  "metadata.set": () => undefined,
  "tasks.trigger": (r) => ({ runs: (r as { runs: Array<{ id: string; taskId: string }> }).runs.map(({ id, taskId }) => ({ id, taskId })) }),
  "tasks.triggerAndWait": (r) => {
    const w = r as { ok: boolean; data?: Array<Record<string, unknown>>; reason?: string };
    if (!w.ok) return { thrown: `tasks.batchTriggerAndWait: the wait for the child run(s) ended without their results (canceled: ${w.reason})` };
    return w.data!.map(({ ok, id, taskId, status, output, error }) =>
      ok ? { ok, id, taskId, output } : { ok, id, taskId, error: { status, ...(error as object) } },
    );
  },
};

/** call makes method's request as its first golden, and returns what was sent and ctx's answer to response. */
async function call(method: Method, golden: Msg, response?: Msg): Promise<{ sent: Msg; answered: Promise<unknown> }> {
  const { ctx, sent, answer } = wire();
  const answered = (calls[method] as (ctx: Ctx, p: unknown) => Promise<unknown>)(ctx, golden.params);
  answered.catch(() => {}); // handled by the caller, later
  const request = await sent;
  if (response !== undefined) answer({ ...response, id: request.id });
  return { sent: request, answered };
}

describe("adapter channel schema", () => {
  it("describes every message type and method of protocol.ts, with goldens", () => {
    const kinds = [...messageTypes.filter((t) => t !== "request" && t !== "response"), ...methods.flatMap((m) => [`request.${m}`, `response.${m}`]), "response.error"];
    assert.deepStrictEqual(Object.keys(goldens).sort(), kinds.sort());
    for (const [kind, msgs] of Object.entries(goldens)) assert.ok(msgs.length > 0, `golden ${kind} has no message`);
    const defined = Object.keys(schema.$defs).filter((d) => (messageTypes as readonly string[]).includes(d.split(".")[0]!));
    const want = [...messageTypes, ...methods.flatMap((m) => [`request.${m}`, `response.${m}`])];
    assert.deepStrictEqual(defined.sort(), want.sort());
  });

  it("holds only goldens valid against it", () => {
    for (const [kind, msgs] of Object.entries(goldens)) {
      for (const msg of msgs) {
        valid("", msg, kind);
        valid(kind === "response.error" ? "response" : kind, msg, kind);
      }
    }
  });

  it("decodes each golden start message with nothing lost", () => {
    for (const golden of goldens.start!) assert.deepStrictEqual(parseStart(golden), golden);
  });

  it("encodes each golden result and error as the adapter sends them", () => {
    for (const golden of goldens.result!) {
      const line = JSON.parse(resultLine("t", golden.output)) as unknown;
      assert.deepStrictEqual(line, golden);
      valid("result", line, "resultLine");
    }
    for (const golden of goldens.error!) {
      const g = golden as unknown as { name: string; message: string; stack: string };
      const thrown = g.name === "NonErrorThrown" ? "nope" : Object.assign(new Error(g.message), { name: g.name, stack: g.stack });
      const msg = errorMessage(thrown);
      assert.deepStrictEqual(msg, golden);
      valid("error", msg, "errorMessage");
    }
  });

  for (const method of methods) {
    it(`encodes ${method} requests as the goldens, and decodes their responses`, async () => {
      for (const golden of goldens[`request.${method}`]!) {
        const { sent, answered } = await call(method, golden, { type: "response", result: null });
        assert.ok(Number.isInteger(sent.id) && sent.id! >= 1, `request id ${sent.id}`);
        assert.deepStrictEqual({ ...sent, id: golden.id }, golden);
        valid(`request.${method}`, sent, "the adapter's request");
        await answered.catch(() => {}); // null is not every method's result
      }
      for (const response of goldens[`response.${method}`]!) {
        const { answered } = await call(method, goldens[`request.${method}`]![0]!, response);
        assert.deepStrictEqual(await answered, answers[method](response.result), `${method} answered ${JSON.stringify(response)}`);
      }
    });
  }

  it("rejects a request answered with an error as the golden says", async () => {
    for (const response of goldens["response.error"]!) {
      const { answered } = await call("wait.for", goldens["request.wait.for"]![0]!, response);
      const e = response.error as { message: string; name?: string };
      await assert.rejects(answered, (err: unknown) => err instanceof RequestError && err.message === e.message && err.name === (e.name ?? "RequestError"));
    }
  });
});
