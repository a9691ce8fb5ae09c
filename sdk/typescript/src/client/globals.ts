// The platform the runtime client uses, declared structurally: @helmr/sdk
// compiles without DOM or Node types, and Node 20+ has all of these.

/** The subset of a fetch Response the client reads. */
export interface FetchResponse {
  status: number;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
  arrayBuffer(): Promise<ArrayBuffer>;
  body: { getReader(): { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(): Promise<void> } } | null;
}

/** The subset of fetch's options the client sets. */
export interface FetchInit {
  method: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  signal?: AbortSignalLike;
}

/** fetch, as the client calls it. */
export type Fetch = (url: string, init: FetchInit) => Promise<FetchResponse>;

/** The subset of AbortSignal the client uses. */
export interface AbortSignalLike {
  readonly aborted: boolean;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

interface Globals {
  fetch?: Fetch;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  TextDecoder: new (label?: string) => { decode(input?: Uint8Array, options?: { stream?: boolean }): string };
  TextEncoder: new () => { encode(input: string): Uint8Array };
  process?: { env?: Record<string, string | undefined> };
  crypto?: { randomUUID?(): string };
}

export const platform = globalThis as unknown as Globals;

/** env reads an environment variable where there is one (Node). */
export function env(name: string): string | undefined {
  return platform.process?.env?.[name];
}

/** sleep resolves after ms, or rejects when signal aborts. */
export function sleep(ms: number, signal?: AbortSignalLike): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new Error("aborted"));
    const onAbort = () => {
      platform.clearTimeout(handle);
      reject(new Error("aborted"));
    };
    const handle = platform.setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** newKey returns a random idempotency key. */
export function newKey(): string {
  const uuid = platform.crypto?.randomUUID?.();
  if (uuid !== undefined) return uuid;
  return Array.from({ length: 4 }, () => Math.random().toString(36).slice(2, 10)).join("-");
}
