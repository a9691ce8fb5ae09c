// The index runner: run on the host at deploy time under Node 20 or newer.
//
//   node index-runner.mjs <bundleDir> <module.mjs> [<module.mjs> ...]
//     stdout: {"tasks":[TaskManifest, ...]}                         exit 0
//   node index-runner.mjs --config <helmr.config.mjs>
//     stdout: {"config":{"project":"...","dirs":["..."]}}           exit 0
//
// On failure stdout is {"error":{"module","message","stack"}} and the exit
// code is 1 (2 for a usage error). Modules are imported, which runs their
// top-level code, but no task's run is called. Anything the modules print
// goes to stderr so that stdout holds exactly one JSON object.

import { IndexFailure, indexConfig, indexModules, type IndexError } from "./indexing.js";

const usage = "usage: index-runner <bundleDir> <module.mjs>... | index-runner --config <helmr.config.mjs>";

// Keep stdout for the result alone.
const writeStdout = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr) as typeof process.stdout.write;

function emit(value: unknown, code: number): void {
  writeStdout(`${JSON.stringify(value)}\n`, () => process.exit(code));
}

function failure(detail: IndexError, code = 1): void {
  emit({ error: detail }, code);
}

async function main(argv: readonly string[]): Promise<void> {
  if (argv[0] === "--config") {
    const path = argv[1];
    if (path === undefined || argv.length !== 2) return failure({ module: "", message: usage, stack: "" }, 2);
    emit({ config: await indexConfig(path) }, 0);
    return;
  }
  const [bundleDir, ...modules] = argv;
  if (bundleDir === undefined || modules.length === 0) return failure({ module: "", message: usage, stack: "" }, 2);
  emit({ tasks: await indexModules(bundleDir, modules) }, 0);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof IndexFailure) return failure(err.detail);
  const e = err instanceof Error ? err : new Error(String(err));
  failure({ module: "", message: e.message, stack: e.stack ?? "" });
});
