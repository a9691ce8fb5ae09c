import { platform } from "./globals.js";
import type { Transport } from "./http.js";
import type { DirListing } from "./types.js";

/**
 * A workspace's files, by paths relative to the workspace (a path that
 * leaves it, through .., an absolute path or a symlink, is a
 * BadRequestError). A file or tar is at most 64 MiB (PayloadTooLargeError).
 * Each call is a direct operation (needs workspaces:exec) and appears in
 * the workspace's trajectory.
 */
export class WorkspaceFiles {
  readonly #t: Transport;

  constructor(t: Transport) {
    this.#t = t;
  }

  /** read returns a file's bytes; a missing file is a NotFoundError. */
  async read(id: string, path: string): Promise<Uint8Array> {
    const res = await this.#t.callRaw("GET", "/v1/workspaces/{id}/files", { path: { id }, query: { path }, idempotent: true });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** readText returns a file's text (UTF-8). */
  async readText(id: string, path: string): Promise<string> {
    return new platform.TextDecoder("utf-8").decode(await this.read(id, path));
  }

  /** write replaces a file with data (text as UTF-8), making its directories. */
  async write(id: string, path: string, data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? new platform.TextEncoder().encode(data) : data;
    await this.#t.call("PUT", "/v1/workspaces/{id}/files", { path: { id }, query: { path }, bytes, idempotent: true });
  }

  /** list returns a directory's entries by name (default: the workspace's top). */
  list(id: string, path?: string): Promise<DirListing> {
    return this.#t.call("GET", "/v1/workspaces/{id}/dir", { path: { id }, query: { path }, idempotent: true });
  }

  /** downloadTar returns a tar of a directory (default: the whole workspace). */
  async downloadTar(id: string, path?: string): Promise<Uint8Array> {
    const res = await this.#t.callRaw("GET", "/v1/workspaces/{id}/tar", { path: { id }, query: { path }, idempotent: true });
    return new Uint8Array(await res.arrayBuffer());
  }

  /**
   * uploadTar unpacks a tar into a directory (default: the workspace's
   * top); a member that would land outside it refuses the whole tar.
   */
  async uploadTar(id: string, tar: Uint8Array, path?: string): Promise<void> {
    await this.#t.call("PUT", "/v1/workspaces/{id}/tar", { path: { id }, query: { path }, bytes: tar, idempotent: true });
  }
}
