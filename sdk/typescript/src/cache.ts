import { assertName } from "./validate.js";

/** A named persistent cache that run steps can mount (package manager caches). */
export interface Cache {
  readonly kind: "cache";
  readonly name: string;
}

/** cache declares a named persistent cache. */
export function cache(name: string): Cache {
  assertName("cache name", name);
  return Object.freeze({ kind: "cache", name });
}
