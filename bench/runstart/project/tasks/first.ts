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
