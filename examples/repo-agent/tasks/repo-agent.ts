import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";

import { cache, image, sandbox, source, task } from "@helmr/sdk";

// The seed's repo-agent image, on the built-in Debian base (on a host that
// reaches a registry, `from("node:24-bookworm-slim")` works the same):
// git and ripgrep from Debian, the tools' npm dependencies installed with a
// persistent npm cache, and the task directory copied in.
const agentImage = image("repo-agent")
  .from("helmr/bookworm-node22")
  .run(["sh", "-ceu", "apt-get update && apt-get install -y --no-install-recommends git ripgrep && rm -rf /var/lib/apt/lists/*"])
  .workdir("/opt/agent")
  .copy("/opt/agent/package.json", source.file("package.json"))
  .run(["npm", "install", "--omit=dev", "--no-audit", "--no-fund"], {
    cache: [{ mountPath: "/root/.npm", cache: cache("repo-agent-npm") }],
  })
  .copy("/opt/agent/tasks/", source.directory("tasks"));

const sbx = sandbox("repo-agent").image(agentImage).resources({ cpu: 2, memory: "2Gi" });

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: "utf8" }).trim();

// Starts a repository in the run's workspace, commits a change, and
// searches the agent's own sources with ripgrep: the tools a coding agent
// drives, all from the image.
export const repoAgent = task({
  id: "repo-agent",
  sandbox: sbx,
  maxDuration: 300,
  run: async (payload: { pattern?: string }) => {
    sh("git", ["init", "-q", "-b", "main"]);
    writeFileSync("NOTES.md", "# Notes\n\nTODO: review the change\n");
    sh("git", ["add", "NOTES.md"]);
    sh("git", ["-c", "user.name=Helmr", "-c", "user.email=agent@helmr.invalid", "commit", "-q", "-m", "Add notes"]);
    const semver = createRequire("/opt/agent/package.json")("semver") as { satisfies(v: string, r: string): boolean };
    return {
      git: sh("git", ["--version"]),
      ripgrep: sh("rg", ["--version"]).split("\n")[0],
      log: sh("git", ["log", "--oneline"]),
      matches: sh("rg", ["-n", "--no-heading", payload.pattern ?? "TODO", "."]).split("\n"),
      nodeSatisfies22: semver.satisfies(process.versions.node, ">=22"),
    };
  },
});
