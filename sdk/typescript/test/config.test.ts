import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { defineConfig } from "../src/index.js";
import { configManifest } from "../src/manifest.js";

describe("defineConfig", () => {
  it("returns the config", () => {
    assert.deepStrictEqual(defineConfig({ project: "hello", dirs: ["./tasks"] }), { project: "hello", dirs: ["./tasks"] });
  });
  it("rejects a config without dirs", () => {
    assert.throws(() => configManifest({ project: "p" }), /dirs must be a non-empty array/);
  });
  it("rejects dirs outside the project", () => {
    assert.throws(() => defineConfig({ project: "p", dirs: ["../x"] }), /stay inside/);
  });
});
