import { image, sandbox, task, WaitError, WaitRejectedError, WaitTimeoutError } from "@helmr/sdk";

// Not in the README: the review's wait, caught. A module of its own, so its
// bundle holds its own copy of the SDK, as any deployed module's does: the
// errors the runtime throws must still be instances of these classes.
const sbx = sandbox("guarded").image(image("guarded").from("helmr/bookworm-node22").workdir("/workspace"));

export const guardedReview = task({
  id: "guarded-review",
  sandbox: sbx,
  run: async (payload: { timeoutSeconds?: number }, ctx) => {
    try {
      const decision = await ctx.wait.human<{ approved: boolean }>({
        displayText: "Post this review to GitHub?",
        ...(payload?.timeoutSeconds ? { timeout: { seconds: payload.timeoutSeconds } } : {}),
      });
      return { approved: decision.approved };
    } catch (err) {
      if (err instanceof WaitRejectedError) {
        return { rejected: true, reason: err.reason, waitError: err instanceof WaitError, name: err.name, message: err.message };
      }
      if (err instanceof WaitTimeoutError) {
        return { timedOut: true, waitError: err instanceof WaitError, name: err.name, message: err.message };
      }
      throw err;
    }
  },
});
