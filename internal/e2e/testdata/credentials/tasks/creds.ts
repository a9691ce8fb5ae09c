import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { get } from "node:https";
import { rootCertificates } from "node:tls";
import { image, sandbox, task } from "@helmr/sdk";

const img = image("creds").from("helmr/bookworm-node22").workdir("/workspace");
const sb = sandbox("creds").image(img).resources({ cpu: 1, memory: "512Mi" });

const sh = (script: string) => {
  try {
    return execFileSync("/bin/sh", ["-c", script], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    const err = e as { status?: number; stdout?: string; stderr?: string };
    return `exit ${err.status}: ${err.stdout ?? ""}${err.stderr ?? ""}`;
  }
};

// Everything a process in the sandbox can read of its environment.
function procEnvirons(): string {
  let all = "";
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    for (const f of ["environ", "cmdline"]) {
      try {
        all += readFileSync(`/proc/${pid}/${f}`, "latin1").replaceAll("\0", "\n");
      } catch {
        // a process that ended, or one not ours
      }
    }
  }
  return all;
}

interface Hosts {
  api: string;
  other: string;
  git: string;
  otherHTTP: string;
  ca: string; // the test hosts' CA: a connection that is not intercepted shows their own certificate
}

// status GETs url trusting ca too, and returns the status and the issuer
// of the certificate the server showed.
const status = (url: string, ca: string, headers: Record<string, string>) =>
  new Promise<string>((resolve) => {
    const req = get(url, { ca: [...rootCertificates, ca], headers }, (res) => {
      const issuer = (res.socket as import("node:tls").TLSSocket).getPeerCertificate().issuer?.CN ?? "";
      res.resume();
      res.on("end", () => resolve(`${res.statusCode} ${issuer}`));
    });
    req.on("error", (e) => resolve(String(e)));
  });

// use: an agent's commands using an egress-bound credential: a bearer
// token with fetch (node) and urllib (python), a git clone and push with
// the token in the URL (Basic auth), the same placeholder sent to a host
// the secret is not bound to, and every way a prompt-injected command
// could try to read the value back.
export const use = task({
  id: "use",
  sandbox: sb,
  secrets: { API_TOKEN: { env: "API_TOKEN" }, TOKEN_FILE: { file: "/run/secrets/token" } },
  run: async (p: Hosts) => {
    const token = process.env.API_TOKEN ?? "";
    const auth = { authorization: `Bearer ${token}` };
    const whoami = await (await fetch(`${p.api}/whoami`, { headers: auth })).text();
    const echo = await (await fetch(`${p.api}/echo`, { method: "POST", headers: auth, body: `body ${token}` })).text();
    const other = await status(`${p.other}/record`, p.ca, auth);
    const otherHTTP = await fetch(`${p.otherHTTP}/record`, { headers: auth }).then((r) => r.status, (e) => String(e));
    const python = sh(
      `python3 -c 'import urllib.request; t=open("/run/secrets/token").read().strip(); print(urllib.request.urlopen(urllib.request.Request("${p.api}/whoami", headers={"Authorization": "Bearer "+t})).read().decode())'`,
    );
    const url = p.git.replace("https://", `https://x-access-token:${token}@`);
    const git = sh(
      `set -e; cd /workspace; git clone -q '${url}' repo 2>&1; cd repo; echo pushed-by-helmr > pushed.txt; git add pushed.txt; ` +
        `git -c user.name=helmr -c user.email=helmr@example.test commit -qm 'from the sandbox'; git push -q origin HEAD 2>&1; echo git-ok`,
    );
    return {
      whoami,
      python: python.trim(),
      echo,
      other,
      otherHTTP,
      git: git.trim(),
      tokenLength: token.length,
      env: JSON.stringify(process.env),
      procs: procEnvirons(),
      file: readFileSync("/run/secrets/token", "utf8"),
      rev: sh("echo $API_TOKEN | rev").trim(),
      b64: sh("echo $API_TOKEN | base64").trim(),
      cut: sh("echo $API_TOKEN | cut -c1-8").trim(),
      od: sh("echo $API_TOKEN | od -c").replace(/\s+/g, ""),
      gitConfig: sh("cat /workspace/repo/.git/config"),
    };
  },
});

// hold: reads its egress-bound credential and a canary into memory, waits
// for a human (a parked run's checkpoint holds its memory), then uses the
// credential again from the restored sandbox, on new connections (those
// open at the checkpoint do not survive it): from node, which keeps the
// CA it loaded at start, and from python, which reads the trust files.
export const hold = task({
  id: "hold",
  sandbox: sb,
  secrets: { API_TOKEN: { env: "API_TOKEN" } },
  run: async (p: { api: string; canary: string }, ctx) => {
    const kept = [`canary:${p.canary}`, `token:${process.env.API_TOKEN}`];
    const whoami = () =>
      new Promise<string>((resolve) => {
        const req = get(`${p.api}/whoami`, { agent: false, headers: { authorization: `Bearer ${process.env.API_TOKEN}` } }, (res) => {
          let body = "";
          res.on("data", (d) => (body += d)).on("end", () => resolve(body));
        });
        req.on("error", (e) => resolve(String(e)));
      });
    const before = await whoami();
    await ctx.wait.human<{ ok: boolean }>({ displayText: "go on?" });
    const after = await whoami();
    const python = sh(
      `python3 -c 'import os,urllib.request; print(urllib.request.urlopen(urllib.request.Request("${p.api}/whoami", headers={"Authorization": "Bearer "+os.environ["API_TOKEN"]})).read().decode())'`,
    ).trim();
    return { before, after, python, kept: kept.length };
  },
});
