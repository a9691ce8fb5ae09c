import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { cache, image, sandbox, source, task } from "../src/index.js";
import { taskManifests, type TaskManifest } from "../src/manifest.js";

const deps = cache("bun-install");
const installTools = [
  "apt-get update",
  "apt-get install -y --no-install-recommends git ripgrep",
  "rm -rf /var/lib/apt/lists/*",
].join(" && ");

const tools = image("tools").from("alpine:3.20").run(["apk", "add", "jq"]);

const agent = image("agent")
  .from("node:24-bookworm-slim")
  .workdir("/workspace")
  .run(["npm", "install", "-g", "bun@1.3.10"])
  .run(["sh", "-ceu", installTools])
  .copy("/workspace/package.json", source.file("package.json"))
  .run(["bun", "install"], {
    cache: [{ mountPath: "/root/.bun/install/cache", cache: deps }],
  })
  .copy("/opt/task", source.directory("./tasks"))
  .copyFrom(tools, "/usr/bin/jq", "/usr/local/bin/jq")
  .env("NODE_ENV", "production")
  .user("node");

const sb = sandbox("agent").image(agent).workspace("/workspace").resources({ cpu: 2, memory: "4Gi" });

const wantImage = {
  name: "agent",
  steps: [
    { kind: "from", ref: "node:24-bookworm-slim" },
    { kind: "workdir", path: "/workspace" },
    { kind: "run", argv: ["npm", "install", "-g", "bun@1.3.10"] },
    { kind: "run", argv: ["sh", "-ceu", installTools] },
    { kind: "copy", dest: "/workspace/package.json", source: { type: "file", path: "package.json" } },
    { kind: "run", argv: ["bun", "install"], cache: [{ mountPath: "/root/.bun/install/cache", cache: "bun-install" }] },
    { kind: "copy", dest: "/opt/task", source: { type: "directory", path: "./tasks" } },
    {
      kind: "copyFrom",
      image: { name: "tools", steps: [{ kind: "from", ref: "alpine:3.20" }, { kind: "run", argv: ["apk", "add", "jq"] }] },
      src: "/usr/bin/jq",
      dest: "/usr/local/bin/jq",
    },
    { kind: "env", key: "NODE_ENV", value: "production" },
    { kind: "user", user: "node" },
  ],
};

describe("image and sandbox", () => {
  it("serialize to the manifest JSON shape", () => {
    assert.deepStrictEqual(sb.toManifest(), {
      name: "agent",
      image: wantImage,
      workspace: "/workspace",
      resources: { cpu: 2, memory: "4Gi" },
    });
  });

  it("a workspace disk size", () => {
    const m = sandbox("big").image(image("b").from("debian")).resources({ memory: "1Gi", disk: "20Gi" }).toManifest();
    assert.deepStrictEqual(m.resources, { memory: "1Gi", disk: "20Gi" });
  });

  it("a root size", () => {
    const m = sandbox("swe").image(image("b").from("debian")).resources({ rootSize: "2Gi" }).toManifest();
    assert.deepStrictEqual(m.resources, { rootSize: "2Gi" });
  });

  it("round-trips through JSON unchanged (no undefined or class fields)", () => {
    const m = sb.toManifest();
    assert.deepStrictEqual(JSON.parse(JSON.stringify(m)), m);
  });

  it("omits unset optional fields", () => {
    const m = sandbox("bare").image(image("b").from("debian")).toManifest();
    assert.deepStrictEqual(m, { name: "bare", image: { name: "b", steps: [{ kind: "from", ref: "debian" }] }, resources: {} });
    assert.equal(JSON.stringify(m), '{"name":"bare","image":{"name":"b","steps":[{"kind":"from","ref":"debian"}]},"resources":{}}');
  });

  it("are immutable", () => {
    const base = image("base").from("debian");
    const a = base.run(["true"]);
    const b = base.workdir("/srv");
    assert.equal(base.toManifest().steps.length, 1);
    assert.deepStrictEqual(a.toManifest().steps[1], { kind: "run", argv: ["true"] });
    assert.deepStrictEqual(b.toManifest().steps[1], { kind: "workdir", path: "/srv" });
    const s = sandbox("s").image(base);
    s.resources({ cpu: 1 });
    assert.deepStrictEqual(s.toManifest().resources, {});
  });

  it("copy options: owner and mode", () => {
    const m = image("c").from("a").copy("/app/", source.directory("src"), { owner: "node:node", mode: 0o640 }).toManifest();
    assert.deepStrictEqual(m.steps[1], { kind: "copy", dest: "/app/", source: { type: "directory", path: "src" }, owner: "node:node", mode: 0o640 });
    const plain = image("c").from("a").copy("/app/x", source.file("x")).toManifest();
    assert.deepStrictEqual(plain.steps[1], { kind: "copy", dest: "/app/x", source: { type: "file", path: "x" } });
  });

  it("from credentials: the vault secret's name in the from step", () => {
    const priv = image("tools").from("registry.example/team/tools:v1", { credentials: "TEAM_REGISTRY" });
    const m = image("app").from("node:24", {}).copyFrom(priv, "/bin/tool", "/usr/bin/tool").toManifest();
    assert.deepStrictEqual(m.steps[0], { kind: "from", ref: "node:24" });
    assert.deepStrictEqual(m.steps[1], {
      kind: "copyFrom",
      image: { name: "tools", steps: [{ kind: "from", ref: "registry.example/team/tools:v1", credentials: "TEAM_REGISTRY" }] },
      src: "/bin/tool",
      dest: "/usr/bin/tool",
    });
    assert.equal(
      JSON.stringify(priv.toManifest()),
      '{"name":"tools","steps":[{"kind":"from","ref":"registry.example/team/tools:v1","credentials":"TEAM_REGISTRY"}]}',
    );
  });

  const bad: Array<[string, () => unknown, RegExp]> = [
    ["bad copy owner", () => image("i").from("a").copy("/x", source.file("y"), { owner: "a b" }), /copy owner must be/],
    ["bad copy mode", () => image("i").from("a").copy("/x", source.file("y"), { mode: 0o10000 }), /copy mode must be/],
    ["bad credentials name", () => image("i").from("r.example/a", { credentials: "user:pass" }), /credentials must name a vault secret/],
    ["credentials not a string", () => image("i").from("r.example/a", { credentials: 1 as never }), /credentials must name a vault secret/],
    ["credentials on a built-in base", () => image("i").from("helmr/bookworm-node22", { credentials: "T" }), /only apply to registry references/],
    ["credentials on an oci base", () => image("i").from("oci:base", { credentials: "T" }), /only apply to registry references/],
    ["image without from", () => sandbox("s").image(image("i")).toManifest(), /has no base/],
    ["step before from", () => image("i").run(["true"]), /call \.from\(ref\) before \.run/],
    ["second from", () => image("i").from("a").from("b"), /first step/],
    ["empty argv", () => image("i").from("a").run([]), /non-empty array/],
    ["relative copy dest", () => image("i").from("a").copy("x", source.file("y")), /absolute path/],
    ["escaping source", () => source.file("../secret"), /stay inside/],
    ["sandbox without image", () => sandbox("s").toManifest(), /has no image/],
    ["root workspace", () => sandbox("s").workspace("/"), /not a usable/],
    ["bad memory", () => sandbox("s").resources({ cpu: 1, memory: "4GB" as "4Gi" }), /memory must be a size/],
    ["bad cpu", () => sandbox("s").resources({ cpu: 0 }), /cpu must be a positive/],
    ["fractional disk", () => sandbox("s").resources({ disk: "1.5Gi" }), /disk must be a whole size/],
    ["disk without unit", () => sandbox("s").resources({ disk: "20GB" as "20Gi" }), /disk must be a whole size/],
    ["root size in GiB", () => sandbox("s").resources({ rootSize: "2GiB" as "2Gi" }), /rootSize must be a whole size/],
    ["fractional root size", () => sandbox("s").resources({ rootSize: "0.5Gi" }), /rootSize must be a whole size/],
    ["bad name", () => image("has space"), /image name must be/],
  ];
  for (const [name, fn, want] of bad) {
    it(`reject ${name}`, () => assert.throws(fn, want));
  }
});

describe("task", () => {
  const hello = task({
    id: "hello",
    sandbox: sandbox("hello").image(image("hello").from("helmr/bookworm-node22")).resources({ cpu: 1, memory: "512Mi" }),
    maxDuration: 60,
    secrets: {
      OPENAI_API_KEY: { env: "OPENAI_API_KEY" },
      GH_KEY: { file: "/run/secrets/gh.pem", mode: 0o400, owner: "1000:1000" },
      KUBE: { directory: "/home/node/.kube", files: ["config"], mode: "600" },
      GITHUB_TOKEN: { env: "GITHUB_TOKEN", egress: ["api.github.com", "*.GitHub.com"] },
      NPM_TOKEN: { file: "/run/secrets/npm", egress: { hosts: ["registry.npmjs.org"], body: true } },
    },
    run: async (payload: { name?: string }) => ({ greeting: `hello ${payload.name ?? "world"}` }),
  });
  const declared = task({ id: "declared-only", sandbox: sandbox("d").image(image("d").from("debian")) });

  it("serializes to a TaskManifest per module export", () => {
    const want: TaskManifest[] = [
      {
        id: "declared-only",
        module: "tasks/hello.mjs",
        export: "declared",
        sandbox: { name: "d", image: { name: "d", steps: [{ kind: "from", ref: "debian" }] }, resources: {} },
        hasRun: false,
      },
      {
        id: "hello",
        module: "tasks/hello.mjs",
        export: "hello",
        maxDuration: 60,
        secrets: {
          OPENAI_API_KEY: { env: "OPENAI_API_KEY" },
          GH_KEY: { file: "/run/secrets/gh.pem", mode: "0400", owner: "1000:1000" },
          KUBE: { directory: "/home/node/.kube", files: ["config"], mode: "0600" },
          GITHUB_TOKEN: { env: "GITHUB_TOKEN", egress: { hosts: ["api.github.com", "*.github.com"] } },
          NPM_TOKEN: { file: "/run/secrets/npm", egress: { hosts: ["registry.npmjs.org"], body: true } },
        },
        sandbox: {
          name: "hello",
          image: { name: "hello", steps: [{ kind: "from", ref: "helmr/bookworm-node22" }] },
          resources: { cpu: 1, memory: "512Mi" },
        },
        hasRun: true,
      },
    ];
    const got = taskManifests({ hello, declared, default: hello, notATask: { id: "x" }, n: 3 }, "tasks/hello.mjs");
    assert.deepStrictEqual(got, want);
  });

  it("reports hasRun false for a task without run", () => {
    assert.equal(declared.run, undefined);
    assert.equal(taskManifests({ declared }, "m.mjs")[0]?.hasRun, false);
  });

  it("keeps run callable", async () => {
    assert.equal(typeof hello.run, "function");
  });

  it("returns a fresh manifest copy each time", () => {
    const [a] = taskManifests({ hello }, "m.mjs");
    assert.ok(a);
    a.sandbox.image.steps.length = 0;
    assert.equal(taskManifests({ hello }, "m.mjs")[0]?.sandbox.image.steps.length, 1);
  });

  const sb1 = sandbox("s").image(image("i").from("debian"));
  it("copy options: owner and mode", () => {
    const m = image("c").from("a").copy("/app/", source.directory("src"), { owner: "node:node", mode: 0o640 }).toManifest();
    assert.deepStrictEqual(m.steps[1], { kind: "copy", dest: "/app/", source: { type: "directory", path: "src" }, owner: "node:node", mode: 0o640 });
    const plain = image("c").from("a").copy("/app/x", source.file("x")).toManifest();
    assert.deepStrictEqual(plain.steps[1], { kind: "copy", dest: "/app/x", source: { type: "file", path: "x" } });
  });

  const bad: Array<[string, () => unknown, RegExp]> = [
    ["bad copy owner", () => image("i").from("a").copy("/x", source.file("y"), { owner: "a b" }), /copy owner must be/],
    ["bad copy mode", () => image("i").from("a").copy("/x", source.file("y"), { mode: 0o10000 }), /copy mode must be/],
    ["a bad id", () => task({ id: "", sandbox: sb1 }), /task id must be/],
    ["a missing sandbox", () => task({ id: "t", sandbox: undefined as never }), /sandbox must be a sandbox/],
    ["a sandbox without image", () => task({ id: "t", sandbox: sandbox("s") }), /has no image/],
    ["a fractional maxDuration", () => task({ id: "t", sandbox: sb1, maxDuration: 1.5 }), /whole number/],
    ["two secret targets", () => task({ id: "t", sandbox: sb1, secrets: { A: { env: "A", file: "/a" } as never } }), /exactly one/],
    ["a relative secret file", () => task({ id: "t", sandbox: sb1, secrets: { A: { file: "a" } } }), /absolute path/],
    ["a bad mode", () => task({ id: "t", sandbox: sb1, secrets: { A: { file: "/a", mode: "rw" } } }), /mode must be/],
    ["a directory without files", () => task({ id: "t", sandbox: sb1, secrets: { A: { directory: "/a", files: [] } } }), /files must list/],
    ["a bad env name", () => task({ id: "t", sandbox: sb1, secrets: { A: { env: "1X" } } }), /variable name/],
    ["an egress IP", () => task({ id: "t", sandbox: sb1, secrets: { A: { env: "A", egress: ["10.0.0.1:443"] } } }), /not a domain name/],
    ["an empty egress", () => task({ id: "t", sandbox: sb1, secrets: { A: { env: "A", egress: [] } } }), /at least one host/],
  ];
  for (const [name, fn, want] of bad) {
    it(`rejects ${name}`, () => assert.throws(fn, want));
  }
});
