import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("bench").image(image("bench").from("helmr/bookworm-node22")).resources({ cpu: 1, memory: "512Mi" });

// Prints one line as soon as it runs: the benchmark times the trip from
// POST /v1/tasks/first/runs to this line arriving over SSE.
export const first = task({
  id: "first",
  sandbox: sb,
  run: async () => {
    console.log("first line");
    return null;
  },
});

// Holds its sandbox for payload.ms milliseconds: the memory benchmark keeps
// several of these running and measures what Helmr adds per sandbox.
export const hold = task({
  id: "hold",
  sandbox: sb,
  maxDuration: 300,
  run: async (payload: { ms: number }) => {
    console.log("holding");
    await new Promise((r) => setTimeout(r, payload.ms));
    return null;
  },
});
