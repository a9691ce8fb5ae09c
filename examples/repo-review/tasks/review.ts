import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";

import { image, sandbox, task, WaitError } from "@helmr/sdk";

// The built-in base has git. On a host that reaches a registry,
// image("review").from("node:24-bookworm-slim").run(["sh", "-c", "apt-get update && apt-get install -y git"])
// works the same.
const img = image("review").from("helmr/bookworm-node22").workdir("/workspace");
const sbx = sandbox("review").image(img).resources({ cpu: 1, memory: "512Mi" });

const git = (...args: string[]) => execFileSync("git", args, { encoding: "utf8" }).trim();

// Clones a repository into the run's workspace, reviews it (its history
// and the TODOs left in it), asks a person before writing anything, and
// only then commits the review to the clone.
export const review = task({
  id: "repo-review",
  sandbox: sbx,
  maxDuration: 600,
  run: async (payload: { repoUrl: string; branch?: string }, ctx) => {
    git("clone", "--quiet", "--branch", payload.branch ?? "main", payload.repoUrl, "repo");
    process.chdir("repo");
    const commits = git("log", "--oneline").split("\n").filter(Boolean);
    const todos = git("grep", "-n", "TODO").split("\n").filter(Boolean);
    const review = [`# Review of ${payload.repoUrl}`, "", `${commits.length} commit(s); ${todos.length} TODO(s):`, ...todos.map((t) => `- ${t}`), ""].join("\n");
    ctx.logger.info("review ready", { commits: commits.length, todos: todos.length });

    let decision: { approved: boolean; note?: string };
    try {
      decision = await ctx.wait.human<{ approved: boolean; note?: string }>({
        displayText: `Write the review of ${payload.repoUrl} (${todos.length} TODOs) to REVIEW.md and commit it?`,
        timeout: { hours: 24 },
      });
    } catch (err) {
      // Rejected (helmr reject RUN --reason ...; a WaitRejectedError) or
      // unanswered for 24 hours (a WaitTimeoutError): write nothing.
      if (err instanceof WaitError) return { written: false, todos: todos.length, why: err.message };
      throw err;
    }
    if (!decision.approved) {
      return { written: false, todos: todos.length, why: decision.note ?? "not approved" };
    }
    writeFileSync("REVIEW.md", review + (decision.note ? `\n${decision.note}\n` : ""));
    git("add", "REVIEW.md");
    git("-c", "user.name=Helmr", "-c", "user.email=review@helmr.invalid", "commit", "--quiet", "-m", "Add review");
    return { written: true, todos: todos.length, commit: git("rev-parse", "--short", "HEAD") };
  },
});
