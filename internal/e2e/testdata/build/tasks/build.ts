import { existsSync, readFileSync } from "node:fs";
import { cache, image, sandbox, task } from "@helmr/sdk";

const counter = cache("counter");

// Each build of a counting step adds one to the number the cache keeps, and
// copies it into the image: the image shows how many builds the cache saw.
const counting = (tag: string) =>
  image(`built-${tag}`)
    .from("helmr/bookworm-node22")
    .run(["sh", "-c", "echo built-by-step > /etc/helmr-built && rm /etc/debian_version"])
    .workdir("/srv/app")
    .run(["sh", "-c", `n=$(cat /cache/n 2>/dev/null || echo 0); echo $((n+1)) > /cache/n; cp /cache/n count; echo ${tag} > tag; echo counted ${tag}`], {
      cache: [{ mountPath: "/cache", cache: counter }],
    });

const report = async () => ({
  built: readFileSync("/etc/helmr-built", "utf8").trim(),
  debianVersion: existsSync("/etc/debian_version"),
  count: readFileSync("/srv/app/count", "utf8").trim(),
  tag: readFileSync("/srv/app/tag", "utf8").trim(),
  cwd: process.cwd(),
});

export const first = task({ id: "first", sandbox: sandbox("first").image(counting("a")), run: report });
export const second = task({ id: "second", sandbox: sandbox("second").image(counting("b")), run: report });

const failing = image("failing-step")
  .from("helmr/bookworm-node22")
  .run(["sh", "-c", "echo about to fail; echo on stderr >&2; exit 7"]);

export const badstep = task({ id: "badstep", sandbox: sandbox("badstep").image(failing), run: async () => "unreachable" });

// Dependencies installed at the workspace path start the run's workspace.
const seededImage = image("seeded")
  .from("helmr/bookworm-node22")
  .workdir("/workspace")
  .run(["sh", "-c", "mkdir -p node_modules/dep && echo seeded > node_modules/dep/index.txt"]);

export const seeded = task({
  id: "seeded",
  sandbox: sandbox("seeded").image(seededImage),
  run: async () => readFileSync("node_modules/dep/index.txt", "utf8").trim(),
});

// An image that puts files where Helmr mounts its own.
const shadowing = image("shadowing").from("helmr/bookworm-node22").run(["sh", "-c", "mkdir -p /opt/helmr && touch /opt/helmr/mine"]);

export const shadow = task({ id: "shadow", sandbox: sandbox("shadow").image(shadowing), run: async () => "unreachable" });

// A run step that reads build secrets (a file and an environment
// variable), prints them, one also in base64, and keeps only their
// lengths.
const withSecret = image("with-secret")
  .from("helmr/bookworm-node22")
  .run(
    ["sh", "-c", 'wc -c < /run/secrets/token > /srv/token-length; printf %s "$TOKEN_ENV" | wc -c > /srv/env-length; echo "read $(cat /run/secrets/token) and $TOKEN_ENV"; printf "as base64: "; printf %s "$TOKEN_ENV" | base64'],
    { secrets: { BUILD_TOKEN: { file: "/run/secrets/token" }, BUILD_ENV: { env: "TOKEN_ENV" } } },
  );

export const secretBuild = task({
  id: "secret-build",
  sandbox: sandbox("with-secret").image(withSecret),
  run: async () => ({
    token: readFileSync("/srv/token-length", "utf8").trim(),
    env: readFileSync("/srv/env-length", "utf8").trim(),
    secretsDir: existsSync("/run/secrets/token"),
  }),
});
