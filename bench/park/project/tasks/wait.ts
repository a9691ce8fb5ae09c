import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("parkbench").image(image("parkbench").from("helmr/bookworm-node22")).resources({ cpu: 1, memory: "512Mi" });

// Prints "before", waits for a human, and prints "after": the benchmark
// parks the run during the wait and times the trip from the approval to
// "after" arriving over SSE.
export const wait = task({
  id: "wait",
  sandbox: sb,
  run: async (_payload: unknown, ctx) => {
    console.log("before");
    await ctx.wait.human({ displayText: "go?" });
    console.log("after");
    return null;
  },
});

// quick finishes at once: run while another is parked on the only slot,
// it shows that slot is free.
export const quick = task({
  id: "quick",
  sandbox: sb,
  run: async () => "done",
});
