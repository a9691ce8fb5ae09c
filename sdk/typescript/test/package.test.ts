import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

describe("@helmr/sdk's package", () => {
  it("has no runtime dependencies: the generator and validator are dev tools", () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as Record<string, unknown>;
    for (const field of ["dependencies", "peerDependencies", "optionalDependencies", "bundleDependencies"]) {
      assert.deepStrictEqual(pkg[field] ?? {}, {}, `package.json ${field}`);
    }
    assert.ok(Object.hasOwn(pkg.devDependencies as object, "openapi-typescript"));
  });
});
