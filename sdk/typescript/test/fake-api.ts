import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** A request the fake API received. */
export interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  /** The body as text (UTF-8). */
  body: string;
  /** The body's bytes. */
  bytes: Buffer;
  at: number;
}

/** A small API stand-in: handlers by "METHOD path", every request recorded. */
export class FakeAPI {
  seen: Seen[] = [];
  handlers = new Map<string, (req: Seen, res: ServerResponse, n: number) => void>();
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (d: Buffer) => chunks.push(d));
    req.on("end", () => {
      const bytes = Buffer.concat(chunks);
      const s: Seen = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: bytes.toString("utf8"), bytes, at: Date.now() };
      this.seen.push(s);
      const key = `${s.method} ${s.url.split("?")[0]}`;
      const h = this.handlers.get(key);
      if (h === undefined) return json(res, 404, { error: { code: "not_found", message: `no handler for ${key}` } });
      h(s, res, this.seen.filter((x) => `${x.method} ${x.url.split("?")[0]}` === key).length);
    });
  });
  url = "";

  async start() {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  reset() {
    this.seen = [];
    this.handlers.clear();
  }
}

/** json answers status with body as JSON. */
export function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}
