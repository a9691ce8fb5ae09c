import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { describe, it } from "node:test";

describe("@helmr/sdk's package", () => {
  it("has no runtime dependencies: the generator and validator are dev tools", () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as Record<string, unknown>;
    for (const field of ["dependencies", "peerDependencies", "optionalDependencies", "bundleDependencies"]) {
      assert.deepStrictEqual(pkg[field] ?? {}, {}, `package.json ${field}`);
    }
    assert.ok(Object.hasOwn(pkg.devDependencies as object, "openapi-typescript"));
  });

  it("exports each entry point's compiled module and declarations, built from src/", () => {
    const root = new URL("../../", import.meta.url);
    const pkg = JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as {
      exports: Record<string, string | { types: string; default: string }>;
      types: string;
      files: string[];
    };
    assert.ok(pkg.files.includes("dist"), "package.json files must ship dist/");
    for (const [subpath, target] of Object.entries(pkg.exports)) {
      if (typeof target === "string") continue; // ./package.json
      assert.deepStrictEqual(Object.keys(target), ["types", "default"], `${subpath}: types first, then default`);
      assert.match(target.default, /^\.\/dist\/.+\.js$/, `${subpath} default`);
      assert.strictEqual(target.types, target.default.replace(/\.js$/, ".d.ts"), `${subpath} types`);
      const source = target.default.replace(/^\.\/dist\//, "src/").replace(/\.js$/, ".ts");
      assert.ok(existsSync(new URL(source, root)), `${subpath}: ${source} compiles to ${target.default}`);
    }
    assert.strictEqual(pkg.types, (pkg.exports["."] as { types: string }).types);
  });
});
