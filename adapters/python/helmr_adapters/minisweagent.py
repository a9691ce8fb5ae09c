"""A mini-swe-agent (v2) environment that runs every action in a Helmr
workspace: in an isolated sandbox of the workspace's task, on the worker
that holds the workspace, with no credential inside it.

    from helmr_adapters.minisweagent import HelmrEnvironment
    env = HelmrEnvironment(server_url="http://127.0.0.1:7400", api_key="hk_...",
                           workspace="ws_...", timeout=60)
    env.execute({"command": "ls"})  # {"output": ..., "returncode": 0, "exception_info": ""}

It behaves as upstream's LocalEnvironment does: the command runs with
``sh``, stderr is merged into stdout in order, a timeout or a failed
request gives returncode -1 with ``exception_info``, and an output whose
first line is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (with returncode 0)
raises ``Submitted`` (mini-swe-agent's, when it is installed).
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import Client, HelmrError

try:  # the harness's own exception, so its agent loop ends the run
    from minisweagent.exceptions import Submitted
except ImportError:  # pragma: no cover - exercised without mini-swe-agent

    class Submitted(Exception):  # type: ignore[no-redef]
        """The agent submitted its final output."""

        def __init__(self, *messages: dict):
            super().__init__(*messages)
            self.messages = messages


SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@dataclass
class HelmrEnvironmentConfig:
    workspace: str
    server_url: str = ""
    """The control plane (default: HELMR_URL)."""
    api_key: str = field(default="", repr=False)
    """An API key with the workspaces:exec grant (default: HELMR_API_KEY). Never serialized."""
    cwd: str = ""
    """Directory the commands start in: relative to the workspace, or an absolute path in the sandbox."""
    env: dict[str, str] = field(default_factory=dict)
    timeout: int = 30

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """What mini-swe-agent's templates and trajectories see: no key."""
        d = asdict(self)
        d.pop("api_key")
        return d


class HelmrEnvironment:
    def __init__(self, *, config_class: type = HelmrEnvironmentConfig, **kwargs: Any):
        self.config = config_class(**kwargs)
        self.client = Client(self.config.server_url or None, self.config.api_key or None)

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Runs action["command"] in the workspace; upstream's result shape."""
        command = action.get("command", "")
        cwd = cwd or self.config.cwd
        timeout = timeout or self.config.timeout
        script = "exec 2>&1\n"
        rel = ""
        if cwd.startswith("/"):
            script += f"cd {shlex.quote(cwd)} || exit 1\n"
        else:
            rel = cwd
        script += command
        try:
            res = self.client.exec(self.config.workspace, command=script, cwd=rel, env=self.config.env, timeout=timeout)
        except (HelmrError, OSError) as e:
            output = {
                "output": "",
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {e}",
                "extra": {"exception_type": type(e).__name__, "exception": str(e)},
            }
        else:
            text = res.get("stdout", "") + res.get("stderr", "")
            if res.get("timedOut"):
                output = {
                    "output": text,
                    "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: Command '{command}' timed out after {timeout} seconds",
                    "extra": {"exception_type": "TimeoutExpired", "exception": f"timed out after {timeout} seconds"},
                }
            else:
                code = res.get("exitCode", -1)
                if res.get("signal") and code == 0:
                    code = -1
                output = {"output": text, "returncode": code, "exception_info": ""}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_SENTINEL and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}}
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # The sandbox is Linux; the harness's own machine is not where commands run.
        return {**self.config.model_dump(), "system": "Linux", "helmr_workspace": self.config.workspace, **kwargs}

    def serialize(self) -> dict:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }
