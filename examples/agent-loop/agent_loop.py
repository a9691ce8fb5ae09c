"""An agent loop that drives a Helmr workspace through the mini-swe-agent
environment adapter: the agent's model proposes shell commands, Helmr runs
each in an isolated sandbox of the workspace, and no credential ever
enters the agent's context (commands can name vault secrets as
${vault:NAME}; outputs come back redacted).

    pip install mini-swe-agent
    export HELMR_URL=http://127.0.0.1:8480 HELMR_API_KEY=hk_...   # a key with workspaces:exec
    python3 examples/agent-loop/agent_loop.py --workspace ws_... --model anthropic/claude-sonnet-4-5 \
        "Find the TODOs in this repository and write them to TODO.md"

With --model scripted it replays a fixed two-step trajectory instead of
calling a language model (what the tests run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters" / "python"))

from helmr_adapters.minisweagent import HelmrEnvironment  # noqa: E402

SYSTEM = """You are a software engineer working in a Linux sandbox ({{system}}),
in the workspace {{helmr_workspace}}. Reply with one shell command per turn
in a ```bash block. When the task is done, run
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` followed by your summary."""


def scripted_model():
    from minisweagent.models.test_models import DeterministicModel, make_output

    return DeterministicModel(outputs=[
        make_output("Look for TODOs.", [{"command": "grep -rn TODO . > TODO.md || true; wc -l < TODO.md"}]),
        make_output("Done.", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; cat TODO.md"}]),
    ])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", help="what the agent should do")
    p.add_argument("--workspace", required=True, help="the Helmr workspace (ws_...)")
    p.add_argument("--model", default="scripted", help="a mini-swe-agent model name, or 'scripted'")
    p.add_argument("--step-limit", type=int, default=20)
    p.add_argument("--trajectory", help="write mini-swe-agent's trajectory here")
    args = p.parse_args()

    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.models import get_model

    model = scripted_model() if args.model == "scripted" else get_model(args.model)
    env = HelmrEnvironment(workspace=args.workspace, timeout=120)
    agent = DefaultAgent(model, env, system_template=SYSTEM, instance_template="{{task}}",
                         step_limit=args.step_limit, output_path=Path(args.trajectory) if args.trajectory else None)
    result = agent.run(args.task)
    print(json.dumps(result, indent=2))
    return 0 if result.get("exit_status") == "Submitted" else 1


if __name__ == "__main__":
    sys.exit(main())
