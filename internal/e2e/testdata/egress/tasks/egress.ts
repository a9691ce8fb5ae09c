import { lookup } from "node:dns/promises";
import { connect } from "node:net";
import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("egress").image(image("egress").from("helmr/bookworm-node22")).resources({ cpu: 1, memory: "256Mi" });

type Payload = { lookups: string[]; connects: { host: string; port: number }[] };

// get connects to host:port and returns what the server sent, or the error code.
const get = (host: string, port: number) =>
  new Promise<string>((resolve) => {
    let got = "";
    const s = connect({ host, port, timeout: 20_000 });
    s.on("data", (d) => (got += d));
    s.on("end", () => resolve(got));
    s.on("timeout", () => { s.destroy(); resolve("TIMEOUT"); });
    s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
  });

const resolve = (name: string) => lookup(name, { family: 4 }).then((a) => a.address, (e) => e.code ?? "error");

// egress reports, in the payload's order, what the sandbox's network let
// it do: each connection ("name:N" resolves N first), then each lookup.
export const egress = task({
  id: "egress",
  sandbox: sb,
  run: async (p: Payload) => {
    const connects: Record<string, string> = {};
    for (const { host, port } of p.connects) {
      const target = host.startsWith("name:") ? await resolve(host.slice(5)) : host;
      connects[`${host}:${port}`] = await get(target, port);
      console.log(`${host}:${port} -> ${connects[`${host}:${port}`]}`);
    }
    const lookups: Record<string, string> = {};
    for (const name of p.lookups) lookups[name] = await resolve(name);
    return { lookups, connects };
  },
});
