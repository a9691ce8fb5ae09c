import { image, sandbox, task } from "@helmr/sdk";

const sb = sandbox("secrets").image(image("secrets").from("helmr/bookworm-node22"));

// Uses its secret the careless way: prints it (in two writes), fails with
// it in the message when asked, and returns it.
export const leaky = task({
  id: "leaky",
  sandbox: sb,
  secrets: { API_TOKEN: { env: "API_TOKEN" } },
  run: async (p: { fail?: boolean }) => {
    const token = process.env.API_TOKEN ?? "";
    const half = Math.floor(token.length / 2);
    process.stdout.write(`token=${token.slice(0, half)}`);
    await new Promise((r) => setTimeout(r, 50));
    process.stdout.write(`${token.slice(half)} (length ${token.length})\n`);
    console.error(`in json: ${JSON.stringify({ token })}`);
    if (p?.fail) throw new Error(`could not use ${token}`);
    return { echo: token, length: token.length };
  },
});
