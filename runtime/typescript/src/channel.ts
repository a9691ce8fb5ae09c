import type { Duplex } from "node:stream";
import { StringDecoder } from "node:string_decoder";

import type { Message, Method, MethodParams, ResponseMessage } from "./protocol.js";

/** A request the agent answered with an error. */
export class RequestError extends Error {
  override name = "RequestError";
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
}

/**
 * Channel speaks newline-delimited JSON over a duplex stream (fd 3 in the
 * guest). Responses to request() are matched by id; every other incoming
 * message is handed out by next() in arrival order.
 */
export class Channel {
  readonly #stream: Duplex;
  readonly #decoder = new StringDecoder("utf8");
  #buffer = "";
  readonly #inbox: Message[] = [];
  readonly #waiters: Array<{ resolve(m: Message | undefined): void; reject(err: Error): void }> = [];
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #closed = false;
  #failure: Error | undefined;

  constructor(stream: Duplex) {
    this.#stream = stream;
    stream.on("data", (chunk: Buffer | string) => this.#onData(chunk));
    stream.on("end", () => this.#onClose());
    stream.on("close", () => this.#onClose());
    stream.on("error", (err: Error) => this.#onClose(err));
  }

  /** next resolves with the next incoming message, or undefined once the channel has closed. */
  next(): Promise<Message | undefined> {
    const m = this.#inbox.shift();
    if (m !== undefined) return Promise.resolve(m);
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    if (this.#closed) return Promise.resolve(undefined);
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** send writes one message and resolves once the stream has accepted it. */
  send(message: Message): Promise<void> {
    return this.sendLine(JSON.stringify(message));
  }

  /** sendLine writes one already-serialized JSON object (without the newline). */
  sendLine(json: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#stream.write(`${json}\n`, (err) => (err ? reject(err) : resolve()));
    });
  }

  /** request sends {type:"request",id,method,params} and resolves with the response's result. */
  request<M extends Method>(method: M, params: MethodParams[M]): Promise<unknown> {
    if (this.#closed) return Promise.reject(new Error(`channel closed before request ${method}`));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.send({ type: "request", id, method, params }).catch((err: Error) => {
        this.#pending.delete(id);
        reject(err);
      });
    });
  }

  /** end finishes the writable side and resolves once everything written is flushed. */
  end(): Promise<void> {
    return new Promise((resolve) => this.#stream.end(() => resolve()));
  }

  #onData(chunk: Buffer | string): void {
    this.#buffer += typeof chunk === "string" ? chunk : this.#decoder.write(chunk);
    let nl: number;
    while ((nl = this.#buffer.indexOf("\n")) >= 0) {
      const line = this.#buffer.slice(0, nl).trim();
      this.#buffer = this.#buffer.slice(nl + 1);
      if (line !== "") this.#onLine(line);
    }
  }

  #onLine(line: string): void {
    let message: Message;
    try {
      message = JSON.parse(line) as Message;
    } catch {
      this.#fail(new Error(`malformed message on channel: ${line.slice(0, 200)}`));
      return;
    }
    if (message?.type === "response" && this.#pending.has(message.id)) {
      this.#settle(message);
      return;
    }
    const waiter = this.#waiters.shift();
    if (waiter !== undefined) waiter.resolve(message);
    else this.#inbox.push(message);
  }

  #settle(response: ResponseMessage): void {
    const pending = this.#pending.get(response.id);
    this.#pending.delete(response.id);
    if (pending === undefined) return;
    if (response.error !== undefined) {
      const err = new RequestError(response.error.message);
      if (response.error.name !== undefined) err.name = response.error.name;
      pending.reject(err);
    } else {
      pending.resolve(response.result);
    }
  }

  #fail(err: Error): void {
    this.#failure ??= err;
    for (const w of this.#waiters.splice(0)) w.reject(err);
  }

  #onClose(err?: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    if (err !== undefined) this.#failure ??= err;
    for (const w of this.#waiters.splice(0)) {
      if (this.#failure !== undefined) w.reject(this.#failure);
      else w.resolve(undefined);
    }
    const reason = this.#failure ?? new Error("channel closed before the response arrived");
    for (const p of this.#pending.values()) p.reject(reason);
    this.#pending.clear();
  }
}
