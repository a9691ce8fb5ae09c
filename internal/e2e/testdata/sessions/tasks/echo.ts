import { image, sandbox, task } from "@helmr/sdk";

const img = image("sessions").from("helmr/bookworm-node22").workdir("/workspace");
const sb = sandbox("sessions").image(img).resources({ cpu: 1, memory: "256Mi" });

// echo reads its session input with for await and appends each message to
// its output, until a message says done; its metadata counts the echoes.
export const echo = task({
  id: "echo",
  sandbox: sb,
  run: async (_payload: null, ctx) => {
    await ctx.metadata.set("phase", "echoing");
    let n = 0;
    for await (const msg of ctx.session.input) {
      const m = msg as { text?: string; done?: boolean };
      if (m.done) break;
      n++;
      await ctx.session.output.append({ echo: m.text, n });
      await ctx.metadata.set("echoed", n);
    }
    await ctx.metadata.set("phase", "done");
    return { echoed: n, seen: ctx.metadata.get("echoed") };
  },
});
