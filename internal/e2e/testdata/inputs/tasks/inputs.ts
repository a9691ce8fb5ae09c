import { image, sandbox, task, type StandardSchemaV1 } from "@helmr/sdk";

const sb = sandbox("inputs").image(image("inputs").from("helmr/bookworm-node22")).resources({ cpu: 1, memory: "256Mi" });

// A JSON Schema input: the control plane refuses payloads that do not fit.
export const typed = task({
  id: "typed",
  sandbox: sb,
  input: {
    type: "object",
    properties: { repo: { type: "string", minLength: 1 }, pr: { type: "integer", minimum: 1 } },
    required: ["repo", "pr"],
  },
  run: async (payload) => `${payload.repo}#${payload.pr}`,
});

// A Standard Schema validator written by hand (as zod or valibot would
// be): its JSON Schema export lands in the manifest, and it parses the
// payload in the sandbox before run, filling in depth.
const repo: StandardSchemaV1<{ repo: string; depth?: number }, { repo: string; depth: number; parsed: true }> = {
  "~standard": {
    version: 1,
    vendor: "e2e",
    validate(value) {
      const v = value as { repo?: unknown; depth?: unknown } | null;
      if (typeof v?.repo !== "string") return { issues: [{ message: "expected a string", path: ["repo"] }] };
      return { value: { repo: v.repo, depth: typeof v.depth === "number" ? v.depth : 2, parsed: true } };
    },
    jsonSchema: {
      input: () => ({ type: "object", properties: { repo: { type: "string" }, depth: { type: "integer" } }, required: ["repo"] }),
    },
  },
};

export const parsed = task({
  id: "parsed",
  sandbox: sb,
  input: repo,
  run: async (payload) => payload,
});

// A validator stricter than its JSON Schema (a refinement JSON Schema
// does not carry): the control plane lets "noslash" through, the guest
// refuses it, and the run fails at once although it may retry.
const slashed: StandardSchemaV1<{ repo: string }> = {
  "~standard": {
    version: 1,
    vendor: "e2e",
    validate(value) {
      const v = value as { repo?: unknown } | null;
      if (typeof v?.repo !== "string" || !v.repo.includes("/")) return { issues: [{ message: "want owner/name", path: ["repo"] }] };
      return { value: { repo: v.repo } };
    },
    jsonSchema: { input: () => ({ type: "object", properties: { repo: { type: "string" } }, required: ["repo"] }) },
  },
};

export const refined = task({
  id: "refined",
  sandbox: sb,
  input: slashed,
  retry: { maxAttempts: 3, minTimeoutInMs: 100 },
  run: async (payload) => payload.repo,
});
