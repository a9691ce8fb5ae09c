import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type { TaskContext } from "../../../sdk/typescript/src/index.js";
import { createContext } from "../src/context.js";

describe("context", () => {
  // Compile-time: the adapter's ctx must satisfy the SDK's TaskContext.
  const ctx: TaskContext = createContext({ id: "run_1", taskId: "t" });

  const waits: Array<[string, () => Promise<unknown>]> = [
    ["human", () => ctx.wait.human({ displayText: "ok?" })],
    ["createToken", () => ctx.wait.createToken()],
    ["forToken", () => ctx.wait.forToken("tok_1")],
    ["for", () => ctx.wait.for({ seconds: 1 })],
    ["until", () => ctx.wait.until(new Date())],
  ];
  for (const [name, call] of waits) {
    it(`ctx.wait.${name} rejects instead of resolving`, async () => {
      await assert.rejects(call(), { name: "Error", message: `ctx.wait.${name} is not supported by this Helmr version yet` });
    });
  }

  it("carries the run", () => {
    assert.deepStrictEqual(ctx.run, { id: "run_1", taskId: "t" });
  });
});
