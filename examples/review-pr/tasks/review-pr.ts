import { writeFile } from "node:fs/promises";

import { cache, image, sandbox, source, task } from "@helmr/sdk";

import { reviewPullRequest } from "../lib/review.js";

const base = image("repo-agent")
  .from("node:24-bookworm-slim")
  .workdir("/workspace")
  .run(["npm", "install", "-g", "bun@1.3.10"])
  .copy("/workspace/package.json", source.file("package.json"))
  .run(["bun", "install"], {
    cache: [{ mountPath: "/root/.bun/install/cache", cache: cache("repo-agent-bun") }],
  })
  .run(["sh", "-ceu", "apt-get update && apt-get install -y git ripgrep"]);

const sbx = sandbox("repo-agent").image(base).resources({ cpu: 2, memory: "4Gi" });

export const reviewPr = task({
  id: "review-pr",
  sandbox: sbx,
  maxDuration: 900,
  secrets: {
    OPENAI_API_KEY: { env: "OPENAI_API_KEY" },
  },
  run: async (event: { prNumber: number }, ctx) => {
    // Call your agent SDK or review tooling here.
    const summary = await reviewPullRequest({
      cwd: process.cwd(),
      prNumber: event.prNumber,
      token: process.env.OPENAI_API_KEY ?? "",
    });

    const decision = await ctx.wait.human<{ approved: boolean }>({
      displayText: "Post this review to GitHub?",
    });

    if (decision.approved) {
      await writeFile("review-summary.txt", `${summary}\n`);
    }
  },
});
