import { writeFile } from "node:fs/promises";

import { image, sandbox, task } from "@helmr/sdk";

// helmr/bookworm-node22 is Helmr's built-in base image (Debian bookworm with
// Node 22), built locally by scripts/build-base-rootfs.sh.
const img = image("hello").from("helmr/bookworm-node22").workdir("/workspace");

const sb = sandbox("hello").image(img).resources({ cpu: 1, memory: "512Mi" });

export const hello = task({
  id: "hello",
  sandbox: sb,
  maxDuration: 60,
  run: async (payload: { name?: string }, ctx) => {
    // payload may be absent when the run was started without one.
    const name = payload?.name ?? "world";
    const greeting = `Hello, ${name}!`;
    console.log(`hello: run ${ctx.run.id} of task ${ctx.run.taskId}`);
    console.log(`hello: node ${process.version} in ${process.cwd()}`);

    // The workspace is the working directory: relative paths land in it.
    await writeFile("hello.txt", `${greeting}\n`);
    console.log("hello: wrote hello.txt");

    return { greeting, file: "hello.txt", node: process.version };
  },
});
