// The review itself: where an agent SDK call goes. It lives outside the
// project's task dirs, so indexing does not scan it; the bundler inlines it.

/** What reviewPullRequest needs. */
export interface ReviewRequest {
  /** The workspace holding the checked-out repository. */
  cwd: string;
  prNumber: number;
  /** The model provider's API key, from the task's declared secret. */
  token: string;
}

/**
 * reviewPullRequest returns a review summary for a pull request. Replace the
 * body with your agent SDK call; this placeholder only reports its inputs.
 */
export async function reviewPullRequest(req: ReviewRequest): Promise<string> {
  if (req.token === "") {
    throw new Error("OPENAI_API_KEY is not set: run with --secret OPENAI_API_KEY=vault:OPENAI_API_KEY");
  }
  return `Review of PR #${req.prNumber} (workspace ${req.cwd}): no agent configured yet.`;
}
