import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { image, sandbox, task } from "@helmr/sdk";

const img = image("notes").from("helmr/bookworm-node22").workdir("/workspace");

// Appends a line to notes.txt in its workspace and returns what the file
// held before: a run attached to the workspace of an earlier one sees
// what that run wrote.
export const notes = task({
  id: "notes",
  sandbox: sandbox("notes").image(img),
  run: async (payload: { line: string; sleepMs?: number }) => {
    if (payload.sleepMs) await new Promise((r) => setTimeout(r, payload.sleepMs));
    const before = existsSync("notes.txt") ? readFileSync("notes.txt", "utf8") : "";
    appendFileSync("notes.txt", payload.line + "\n");
    return before;
  },
});

// Like notes, in a sandbox whose workspaces have a 24Mi size quota.
export const sized = task({
  id: "sized",
  sandbox: sandbox("sized").image(img).resources({ disk: "24Mi" }),
  run: async (payload: { line: string }) => {
    appendFileSync("notes.txt", payload.line + "\n");
    return readFileSync("notes.txt", "utf8");
  },
});
