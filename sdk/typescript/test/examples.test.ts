import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

// .build/test/examples.test.js -> sdk/typescript
const sdkDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const repo = join(sdkDir, "..", "..");
const tsc = join(sdkDir, "node_modules", "typescript", "bin", "tsc");

// The product README's review example (helmr.config.ts and the task,
// verbatim), which internal/e2e's TestReadmeReview also runs.
const readmeReview = join("internal", "e2e", "testdata", "readme-review");

describe("examples type-check against the SDK", () => {
  for (const example of ["examples/hello", "examples/repo-agent", "examples/repo-review", "examples/review-pr", readmeReview]) {
    it(example, async () => {
      const project = join(repo, example, "tsconfig.json");
      const result = await promisify(execFile)(process.execPath, [tsc, "-p", project, "--noEmit"]).then(
        () => ({ ok: true, out: "" }),
        (err: { stdout?: string; stderr?: string }) => ({ ok: false, out: `${err.stdout ?? ""}${err.stderr ?? ""}` }),
      );
      assert.ok(result.ok, `tsc -p ${project} failed:\n${result.out}`);
    });
  }

  it("rejects a payload of the wrong type (the check is not vacuous)", async () => {
    const project = join(sdkDir, "test", "fixtures", "bad-payload", "tsconfig.json");
    const err = await promisify(execFile)(process.execPath, [tsc, "-p", project, "--noEmit"]).then(
      () => undefined,
      (e: { stdout?: string }) => e.stdout ?? "",
    );
    assert.ok(err !== undefined, "tsc accepted a mistyped task");
    assert.match(err, /TS2322|TS2345|TS2353/);
  });
});
