// The API's operations as types, derived from those openapi-typescript
// generates from proto/openapi.yaml (gen/openapi.ts, committed; scripts/ts-check.sh
// fails when it is stale): what a method and path take (path and query
// parameters, a JSON body) and what they answer. Types only: nothing here
// exists at run time.

import type { components, paths } from "./gen/openapi.js";

/** The document's named schemas (components.schemas). */
export type Schemas = components["schemas"];

/** The HTTP methods the client sends. */
export type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

/** The operation of method on path (never if the document has none). */
export type Operation<M extends Method, P extends keyof paths> = NonNullable<paths[P][Lowercase<M> & keyof paths[P]]>;

/** The paths that have an operation for method. */
export type PathsWith<M extends Method> = {
  [P in keyof paths]: [Operation<M, P>] extends [never] ? never : P;
}[keyof paths];

type JSONContent<R> = R extends { content: { "application/json": infer T } } ? T : never;

/** The JSON an operation answers with: its 200 (else 201) body; undefined for a 204. */
export type Answer<M extends Method, P extends PathsWith<M>> =
  Operation<M, P>["responses"] extends infer R
    ? R extends { 200: infer S }
      ? JSONContent<S>
      : R extends { 201: infer S }
        ? JSONContent<S>
        : R extends { 204: unknown }
          ? undefined
          : never
    : never;

type Parameters<O> = O extends { parameters: infer X } ? X : never;

/** An operation's path parameters ({id} in the path). */
export type PathParams<O> = Parameters<O> extends { path: infer X } ? X : never;

/** An operation's query parameters. */
export type QueryParams<O> = Parameters<O> extends { query?: infer X } ? X : never;

/** An operation's JSON request body. */
export type JSONBody<O> = O extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;

type Absent<T> = [T] extends [never] ? true : [T] extends [undefined] ? true : false;

/**
 * What call takes besides the method and path: the path parameters (when
 * the path has some), the query (required when one of its parameters is)
 * and the JSON body, each typed by the document.
 */
export type CallParams<M extends Method, P extends PathsWith<M>> = (Absent<PathParams<Operation<M, P>>> extends true
  ? { path?: undefined }
  : { path: PathParams<Operation<M, P>> }) &
  (Absent<QueryParams<Operation<M, P>>> extends true
    ? { query?: undefined }
    : {} extends QueryParams<Operation<M, P>>
      ? { query?: QueryParams<Operation<M, P>> }
      : { query: QueryParams<Operation<M, P>> }) &
  (Absent<JSONBody<Operation<M, P>>> extends true ? { body?: undefined } : { body?: JSONBody<Operation<M, P>> });
