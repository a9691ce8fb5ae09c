import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Duplex, PassThrough } from "node:stream";

import { Channel, RequestError } from "../src/channel.js";

function pair(): { channel: Channel; toAdapter: PassThrough; fromAdapter: PassThrough } {
  const toAdapter = new PassThrough();
  const fromAdapter = new PassThrough();
  const stream = Duplex.from({ readable: toAdapter, writable: fromAdapter });
  return { channel: new Channel(stream), toAdapter, fromAdapter };
}

function nextLine(stream: PassThrough): Promise<unknown> {
  return new Promise((resolve) => stream.once("data", (d: Buffer) => resolve(JSON.parse(d.toString("utf8")))));
}

describe("channel", () => {
  it("splits messages across and within chunks", async () => {
    const { channel, toAdapter } = pair();
    toAdapter.write('{"type":"start","a":');
    toAdapter.write('1}\n{"type":"x"}\n\n');
    assert.deepStrictEqual(await channel.next(), { type: "start", a: 1 });
    assert.deepStrictEqual(await channel.next(), { type: "x" });
    toAdapter.end();
    assert.equal(await channel.next(), undefined);
  });

  it("matches responses to requests by id", async () => {
    const { channel, toAdapter, fromAdapter } = pair();
    const first = nextLine(fromAdapter);
    const a = channel.request("wait.human", { displayText: "ok?" });
    assert.deepStrictEqual(await first, { type: "request", id: 1, method: "wait.human", params: { displayText: "ok?" } });
    const second = nextLine(fromAdapter);
    const b = channel.request("wait.for", { seconds: 1 });
    assert.deepStrictEqual(await second, { type: "request", id: 2, method: "wait.for", params: { seconds: 1 } });
    toAdapter.write('{"type":"response","id":2,"error":{"message":"timed out","name":"WaitTimeout"}}\n');
    toAdapter.write('{"type":"other"}\n{"type":"response","id":1,"result":{"approved":true}}\n');
    assert.deepStrictEqual(await a, { approved: true });
    await assert.rejects(b, (err: unknown) => err instanceof RequestError && err.name === "WaitTimeout" && err.message === "timed out");
    assert.deepStrictEqual(await channel.next(), { type: "other" });
  });

  it("fails pending requests when the channel closes", async () => {
    const { channel, toAdapter } = pair();
    const r = channel.request("wait.human", { displayText: "ok?" });
    toAdapter.end();
    await assert.rejects(r, /channel closed before the response arrived/);
  });
});
