import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { image, sandbox, task } from "@helmr/sdk";

const img = image("failing").from("helmr/bookworm-node22");
const sb = sandbox("failing").image(img).resources({ cpu: 1, memory: "256Mi" });
const small = sandbox("small").image(img).resources({ cpu: 1, memory: "128Mi" });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const throws = task({
  id: "throws",
  sandbox: sb,
  run: async () => {
    console.log("about to throw");
    throw new Error("boom from the task");
  },
});

export const exits = task({
  id: "exits",
  sandbox: sb,
  run: async () => {
    console.error("exiting with 3");
    process.exit(3);
  },
});

export const slow = task({
  id: "slow",
  sandbox: sb,
  maxDuration: 2,
  run: async () => {
    console.log("sleeping past maxDuration");
    await sleep(60_000);
    return "unreachable";
  },
});

export const sleeper = task({
  id: "sleeper",
  sandbox: sb,
  maxDuration: 600,
  run: async () => {
    spawn("sleep", ["600"], { stdio: "ignore" });
    for (let i = 0; ; i++) {
      console.log(`tick ${i}`);
      await sleep(100);
    }
  },
});

export const oom = task({
  id: "oom",
  sandbox: small,
  run: async () => {
    const hog: Buffer[] = [];
    for (let i = 0; i < 4096; i++) {
      hog.push(Buffer.alloc(1 << 20, i % 256));
      if (i % 64 === 0) console.log(`allocated ${i} MiB`);
    }
    return hog.length;
  },
});

// Room enough that the fork bomb meets the process limit, not the memory
// limit (under gVisor each guest process costs the sandbox more memory).
const roomy = sandbox("roomy").image(img).resources({ cpu: 1, memory: "1Gi" });

export const forkbomb = task({
  id: "forkbomb",
  sandbox: roomy,
  maxDuration: 60,
  run: async () => {
    // A shell fork bomb whose processes stay alive, detached; the pids limit
    // must stop it, after which even the task cannot fork.
    // Every shell blocks reading fd 3, a pipe this task holds open, so the
    // processes stay until the sandbox goes.
    spawn("sh", ["-c", "b() { b & b & read x <&3; }; b"], {
      stdio: ["ignore", "ignore", "ignore", "pipe"],
      detached: true,
    });
    // Let the bomb run into the limit; the worker reports the refused forks.
    await sleep(3000);
    const pids = readdirSync("/proc").filter((n) => /^[0-9]+$/.test(n)).length;
    return { pids };
  },
});

type ProbePayload = { hostPid: number; port: number };

function tryWrite(p: string): string {
  try {
    writeFileSync(p, "x");
    return "ok";
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? "error";
  }
}

export const probe = task({
  id: "probe",
  sandbox: sb,
  run: async (p: ProbePayload) => {
    const connectResult = await new Promise<string>((resolve) => {
      const s = connect({ host: "127.0.0.1", port: p.port });
      s.setTimeout(2000, () => { s.destroy(); resolve("timeout"); });
      s.on("connect", () => { s.destroy(); resolve("connected"); });
      s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
    });
    const status = readFileSync("/proc/self/status", "utf8");
    return {
      hostPidVisible: existsSync(`/proc/${p.hostPid}`) && p.hostPid !== process.pid,
      pid1: readFileSync("/proc/1/cmdline", "utf8").split("\0")[0],
      // gVisor has no /sys/class/net; /proc/net/dev lists interfaces everywhere.
      interfaces: existsSync("/sys/class/net") ? readdirSync("/sys/class/net").sort() : [],
      netDev: readFileSync("/proc/net/dev", "utf8").split("\n").slice(2).map((l) => l.trim().split(":")[0]).filter(Boolean),
      connectHost: connectResult,
      writeEtc: tryWrite("/etc/helmr-probe"),
      writeUsr: tryWrite("/usr/helmr-probe"),
      writeRoot: tryWrite("/helmr-probe"),
      writeTmp: tryWrite("/tmp/helmr-probe"),
      writeWorkspace: tryWrite("probe.txt"),
      uidMap: readFileSync("/proc/self/uid_map", "utf8").trim().split(/\s+/),
      capEff: /CapEff:\s*([0-9a-f]+)/.exec(status)?.[1],
      hostname: readFileSync("/etc/hostname", "utf8").trim(),
      cwd: process.cwd(),
    };
  },
});

// An image whose PATH has no node: the run fails in image preparation.
const noNode = sandbox("nonode").image(image("nonode").from("helmr/bookworm-node22").env("PATH", "/opt/none"));

export const nonode = task({
  id: "nonode",
  sandbox: noNode,
  run: async () => "unreachable",
});

// More than any worker here offers: the run waits, saying why.
const huge = sandbox("huge").image(img).resources({ cpu: 64, memory: "512Gi" });

export const oversized = task({
  id: "oversized",
  sandbox: huge,
  run: async () => "unreachable",
});

// Writes to its workspace until the disk refuses: under a workspace quota
// the run fails on ENOSPC.
export const fill = task({
  id: "fill",
  sandbox: sb,
  run: async () => {
    const chunk = Buffer.alloc(1 << 20, 120);
    for (let i = 0; i < 4096; i++) writeFileSync(`fill-${i}.bin`, chunk);
    return "the workspace never filled up";
  },
});
