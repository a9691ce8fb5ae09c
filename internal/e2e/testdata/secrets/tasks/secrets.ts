import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("secrets").image(image("secrets").from("helmr/bookworm-node22"));

// Uses its secret the careless way: prints it (in two writes, in JSON and
// in base64), fails with it in the message when asked, and returns it.
export const leaky = task({
  id: "leaky",
  sandbox: sb,
  secrets: { API_TOKEN: { env: "API_TOKEN" } },
  run: async (p: { fail?: boolean }) => {
    const token = process.env.API_TOKEN ?? "";
    const half = Math.floor(token.length / 2);
    process.stdout.write(`token=${token.slice(0, half)}`);
    await new Promise((r) => setTimeout(r, 50));
    process.stdout.write(`${token.slice(half)} (length ${token.length})\n`);
    console.error(`in json: ${JSON.stringify({ token })}`);
    console.log(`basic auth: ${Buffer.from(`u:${token}`).toString("base64")}`);
    if (p?.fail) throw new Error(`could not use ${token}`);
    return { echo: token, length: token.length };
  },
});

const asNobody = sandbox("nobody").image(image("nobody").from("helmr/bookworm-node22").user("nobody"));

// Reads its file and directory secrets and reports what it found.
export const files = task({
  id: "files",
  sandbox: asNobody,
  secrets: {
    API_KEY: { file: "/run/secrets/api-key", mode: 0o400 },
    CERTS: { directory: "/run/certs", files: ["ca.pem", "client.pem"], mode: 0o440 },
  },
  run: async () => {
    const { readFileSync, statSync } = await import("node:fs");
    const mode = (p: string) => (statSync(p).mode & 0o7777).toString(8);
    return {
      uid: process.getuid?.(),
      keyLength: readFileSync("/run/secrets/api-key", "utf8").length,
      keyMode: mode("/run/secrets/api-key"),
      dirMode: mode("/run/certs"),
      ca: readFileSync("/run/certs/ca.pem", "utf8"),
      clientMode: mode("/run/certs/client.pem"),
    };
  },
});

// Asks for a file its own user could not read.
export const unreadable = task({
  id: "unreadable",
  sandbox: asNobody,
  secrets: { API_KEY: { file: "/run/secrets/root-only", mode: 0o400, owner: "root" } },
  run: async () => "unreachable",
});
