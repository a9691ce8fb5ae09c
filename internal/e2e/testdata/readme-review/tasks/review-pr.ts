// The product README's review example, verbatim from its first line to the
// end of the task (readme_review_test.go runs it; sdk/typescript's examples
// test type-checks it). Only reviewPullRequest, which the README leaves to
// the reader, is declared below the example.
import { cache, image, sandbox, source, task } from "@helmr/sdk"
import { writeFile } from "node:fs/promises"
const base = image("repo-agent")
.from("node:24-bookworm-slim")
.workdir("/workspace")
.run(["npm", "install", "-g", "bun@1.3.10"])
.copy("/workspace/package.json", source.file("package.json"))
.run(["bun", "install"], {
cache: [{ mountPath: "/root/.bun/install/cache", cache: cache("repo-agent-bun") }],
})
.run([
"sh",
"-ceu",
"apt-get update && apt-get install -y git ripgrep",
])
const sbx = sandbox("repo-agent")
.image(base)
.resources({ cpu: 2, memory: "4Gi" })
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
})
const decision = await ctx.wait.human<{ approved: boolean }>({
displayText: "Post this review to GitHub?",
})
if (decision.approved) {
await writeFile("review-summary.txt", `${summary}\n`)
}
},
})

// --- not in the README ---

/**
 * reviewPullRequest stands in for an agent SDK call: it needs the task's
 * declared secret (never echoed) and returns a summary naming the PR.
 */
async function reviewPullRequest(req: { cwd: string; prNumber: number; token: string }): Promise<string> {
  if (req.token === "") {
    throw new Error("OPENAI_API_KEY is not set: run with --secret OPENAI_API_KEY=vault:OPENAI_API_KEY")
  }
  return `Review of PR #${req.prNumber}: looks good.`
}
