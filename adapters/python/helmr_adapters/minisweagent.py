"""A mini-swe-agent (v2) environment that runs every action in a Helmr
workspace: in an isolated sandbox of the workspace's task, on the worker
that holds the workspace, with no credential inside it.

    from helmr_adapters.minisweagent import HelmrEnvironment
    env = HelmrEnvironment(server_url="http://127.0.0.1:8480", api_key="hk_...",
                           workspace="ws_...", timeout=60)
    env.execute({"command": "ls"})  # {"output": ..., "returncode": 0, "exception_info": ""}

It behaves as upstream's LocalEnvironment does: the command runs with
``sh`` (or the configured ``interpreter``, as upstream's DockerEnvironment
runs it), stderr is merged into stdout in order, a timeout or a failed
request gives returncode -1 with ``exception_info``, and an output whose
first line is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (with returncode 0)
raises ``Submitted`` (mini-swe-agent's, when it is installed).

Its template variables are those upstream environments give, taken from
the sandbox where the commands run: ``uname``'s fields (``system``,
``node``, ``release``, ``version``, ``machine``, ``processor``) and the
sandbox's environment variables, read once; plus the configuration's
fields and ``helmr_workspace``. So every configuration mini-swe-agent
ships renders, and a prompt describes the sandbox, not the machine the
harness runs on.

Settings of other environment classes (a configuration written for
docker sets ``image``, ``run_args``, ``container_timeout``, ...) are
ignored with a warning, so such a configuration runs here with
``environment.environment_class`` switched to this class.
"""

from __future__ import annotations

import dataclasses
import logging
import re
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

# platform.uname()'s fields, in its order; what upstream environments give
# their templates.
UNAME_FIELDS = ("system", "node", "release", "version", "machine", "processor")

# Runs in the sandbox once per environment: uname's fields, one a line,
# then the environment a command starts with, NUL-separated. No Python:
# any image with a POSIX shell and uname answers.
_PROBE = "uname -s; uname -n; uname -r; uname -v; uname -m; uname -p 2>/dev/null || echo unknown; " \
         "cat /proc/self/environ 2>/dev/null || env | tr '\\n' '\\0'"

# Runs each command: stderr into stdout, into the absolute directory given
# as $1 when there is one, then the interpreter with the command as its
# last argument.
_WRAPPER = 'exec 2>&1; if [ -n "$1" ]; then cd "$1" || exit 1; fi; shift; exec "$@"'

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

logger = logging.getLogger("minisweagent.environment")


@dataclass
class HelmrEnvironmentConfig:
    workspace: str = ""
    """The Helmr workspace the commands run in (ws_...). Required."""
    server_url: str = ""
    """The control plane (default: HELMR_URL)."""
    api_key: str = field(default="", repr=False)
    """An API key with the workspaces:exec grant (default: HELMR_API_KEY). Never serialized."""
    cwd: str = ""
    """Directory the commands start in: relative to the workspace, or an absolute path in the sandbox."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables every command gets (values may name vault secrets as ${vault:NAME})."""
    timeout: int = 30
    """Seconds a command may run."""
    interpreter: list[str] = field(default_factory=lambda: ["sh", "-c"])
    """What runs a command: the command is its last argument (upstream's SWE-bench configurations set ["bash", "-c"])."""

    def __post_init__(self) -> None:
        if not isinstance(self.workspace, str) or not self.workspace:
            raise ValueError("HelmrEnvironment: workspace is required: the id of a Helmr workspace "
                             "(ws_...; with mini, -c environment.workspace=ws_...)")
        if not isinstance(self.interpreter, list) or not self.interpreter or \
                not all(isinstance(a, str) and a for a in self.interpreter):
            raise ValueError(f"HelmrEnvironment: interpreter must be a list of non-empty strings "
                             f"such as [\"bash\", \"-c\"], not {self.interpreter!r}")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or self.timeout <= 0:
            raise ValueError(f"HelmrEnvironment: timeout must be a positive number of seconds, not {self.timeout!r}")
        if not isinstance(self.env, dict):
            raise ValueError(f"HelmrEnvironment: env must be a mapping of names to strings, not {self.env!r}")
        for k, v in self.env.items():
            if not isinstance(k, str) or not _ENV_NAME.match(k):
                raise ValueError(f"HelmrEnvironment: env name {k!r} is not a valid variable name")
            if not isinstance(v, str):
                raise ValueError(f"HelmrEnvironment: env {k} must be a string, not {v!r}")
        if not isinstance(self.cwd, str):
            raise ValueError(f"HelmrEnvironment: cwd must be a string, not {self.cwd!r}")

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """What mini-swe-agent's templates and trajectories see: no key."""
        d = asdict(self)
        d.pop("api_key")
        return d


class HelmrEnvironment:
    def __init__(self, *, config_class: type = HelmrEnvironmentConfig, **kwargs: Any):
        if dataclasses.is_dataclass(config_class):
            known = {f.name for f in dataclasses.fields(config_class)}
            ignored = sorted(k for k in kwargs if k not in known)
            if ignored:
                logger.warning("HelmrEnvironment ignores %s: settings of another environment class", ", ".join(ignored))
            kwargs = {k: v for k, v in kwargs.items() if k in known}
        self.config = config_class(**kwargs)
        self.client = Client(self.config.server_url or None, self.config.api_key or None)
        self._sandbox_vars: dict[str, str] | None = None

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Runs action["command"] in the workspace; upstream's result shape."""
        command = action.get("command", "")
        cwd = cwd or self.config.cwd
        timeout = timeout or self.config.timeout
        absolute, relative = (cwd, "") if cwd.startswith("/") else ("", cwd)
        argv = ["/bin/sh", "-c", _WRAPPER, "helmr", absolute, *self.config.interpreter, command]
        try:
            res = self.client.exec(self.config.workspace, argv=argv, cwd=relative, env=self.config.env, timeout=timeout)
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

    def sandbox_vars(self) -> dict[str, str]:
        """uname's fields and the environment variables of the sandbox,
        read with one command the first time and kept."""
        if self._sandbox_vars is None:
            self._sandbox_vars = self._probe()
        return self._sandbox_vars

    def _probe(self) -> dict[str, str]:
        what = f"helmr: read uname and the environment in workspace {self.config.workspace}"
        try:
            res = self.client.exec(self.config.workspace, argv=["/bin/sh", "-c", _PROBE], timeout=60)
        except (HelmrError, OSError) as e:
            raise RuntimeError(f"{what}: {e}") from e
        lines = res.get("stdout", "").split("\n", len(UNAME_FIELDS))
        if res.get("exitCode") != 0 or len(lines) <= len(UNAME_FIELDS) - 1 or not lines[0]:
            raise RuntimeError(f"{what}: exit {res.get('exitCode')}: {res.get('stderr', '')[-500:]}")
        out: dict[str, str] = {}
        if len(lines) > len(UNAME_FIELDS):
            for entry in lines[len(UNAME_FIELDS)].split("\0"):
                name, sep, value = entry.partition("=")
                if sep and _ENV_NAME.match(name):
                    out[name] = value
        uname = dict(zip(UNAME_FIELDS, lines))
        if uname["processor"] == "unknown":
            uname["processor"] = ""  # as platform.uname() reports it
        out.update(uname)
        return out

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # Upstream's local environment gives the harness machine's uname and
        # environment; commands run in the sandbox, so its own are given,
        # under the configuration (an image's variable named like a
        # documented field does not hide it).
        sandbox = self.sandbox_vars()
        env = {k: v for k, v in sandbox.items() if k not in UNAME_FIELDS}
        uname = {k: sandbox[k] for k in UNAME_FIELDS}
        return {**env, **self.config.model_dump(), **uname, "helmr_workspace": self.config.workspace, **kwargs}

    def serialize(self) -> dict:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }
