// The guest adapter: `node /opt/helmr/runtime/adapter.mjs`, started by the
// guest agent with fd 3 as a bidirectional channel (see protocol.ts). It reads
// one start message, runs the task (its ctx.wait.* are requests to the worker,
// answered on the same channel), writes one result or error message, waits
// for it to flush and exits: 0 after a result, 1 after an error. stdout and
// stderr are the task's own; the agent records them as log lines.

import { Socket } from "node:net";

import { Channel } from "./channel.js";
import { AdapterError, errorMessage } from "./errors.js";
import { parseStart } from "./protocol.js";
import { runTask } from "./run-task.js";

const CHANNEL_FD = 3;

let finished = false;

async function finish(channel: Channel | undefined, line: string): Promise<void> {
  if (finished) return;
  finished = true;
  const code = line.startsWith('{"type":"result"') ? 0 : 1;
  if (channel === undefined) {
    process.stderr.write(`helmr adapter: ${line}\n`);
    process.exit(2);
  }
  try {
    await channel.sendLine(line);
    await channel.end();
  } catch (err) {
    process.stderr.write(`helmr adapter: cannot write to the channel: ${String(err)}\n${line}\n`);
    process.exit(2);
  }
  process.exit(code);
}

async function main(): Promise<void> {
  let channel: Channel | undefined;
  const fail = (thrown: unknown) => void finish(channel, JSON.stringify(errorMessage(thrown)));
  process.on("uncaughtException", fail);
  process.on("unhandledRejection", fail);

  try {
    // allowHalfOpen: the agent may shut down its side after the start
    // message; the adapter must still be able to answer.
    const socket = new Socket({ fd: CHANNEL_FD, readable: true, writable: true, allowHalfOpen: true });
    channel = new Channel(socket);
  } catch (err) {
    return finish(undefined, JSON.stringify(errorMessage(new AdapterError(`open channel fd ${CHANNEL_FD}: ${String(err)}`))));
  }

  let start;
  try {
    const first = await channel.next();
    if (first === undefined) throw new AdapterError("channel closed before the start message");
    start = parseStart(first);
  } catch (err) {
    const e = err instanceof AdapterError ? err : new AdapterError(err instanceof Error ? err.message : String(err));
    return finish(channel, JSON.stringify(errorMessage(e)));
  }
  Object.assign(process.env, start.env ?? {});
  const ch = channel;
  return finish(channel, await runTask(start, (method, params) => ch.request(method, params)));
}

void main();
