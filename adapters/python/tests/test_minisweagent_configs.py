"""Every configuration the pinned mini-swe-agent ships, driven through
HelmrEnvironment on a stock sandbox (a workspace of a task on the
built-in base image) by mini-swe-agent's own DefaultAgent with its
deterministic test models, to Submitted.

The configurations are enumerated from the installed package, so a new
pin's new configurations are covered (or fail here until they are). Each
is used as `mini -c CONFIG -c environment.environment_class=...` would
use it: its agent section (templates, limits), its model's observation
template and output format, and its environment section (cwd, env,
interpreter, timeout; other environment classes' settings are ignored with
a warning). The scripted model answers in the format the configuration's
prompts ask for: a ```mswea_bash_command``` block or a
<mswea_bash_command> element (parsed with upstream's own parser against
the configuration's action_regex), or a bash tool call.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import sys
import unittest
from pathlib import Path
from types import SimpleNamespace

# litellm (imported for the text-based models' default action_regex) would
# fetch its model cost map from the network on import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helmr_adapters.minisweagent import HelmrEnvironment, HelmrEnvironmentConfig  # noqa: E402

from helmr_dev import HelmrDev  # noqa: E402

try:
    import minisweagent  # noqa: F401

    HAVE_UPSTREAM = True
except ImportError:
    HAVE_UPSTREAM = False

HELMR_ENVIRONMENT = "helmr_adapters.minisweagent.HelmrEnvironment"

# Configurations that are not complete on their own, and the one they
# extend (from the file's own header: "It should be used together with
# the base swebench config").
OVERLAYS = {
    "benchmarks/swebench_modal.yaml": "benchmarks/swebench.yaml",
}

# Configurations that cannot run here, each with the reason. None so far.
EXCLUDED: dict[str, str] = {}


def shipped_configs() -> list[str]:
    from minisweagent.config import builtin_config_dir

    return sorted(p.relative_to(builtin_config_dir).as_posix() for p in Path(builtin_config_dir).rglob("*.yaml"))


def load_config(name: str) -> dict:
    import yaml
    from minisweagent.config import builtin_config_dir
    from minisweagent.utils.serialize import recursive_merge

    own = yaml.safe_load((Path(builtin_config_dir) / name).read_text(encoding="utf-8")) or {}
    if name in OVERLAYS:
        return recursive_merge(load_config(OVERLAYS[name]), own)
    return own


@unittest.skipUnless(HAVE_UPSTREAM or os.environ.get("HELMR_REQUIRE_ALL"), "mini-swe-agent is not installed (scripts/python-adapters.sh installs it)")
class ShippedConfigsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dev = HelmrDev()
        try:
            cls.ws = cls.dev.workspace()
            probe = HelmrEnvironment(server_url=cls.dev.url, api_key=cls.dev.api_key, workspace=cls.ws)
            cls.uname = probe.client.exec(cls.ws, argv=["uname", "-srvm"])["stdout"].strip()
        except Exception:
            cls.dev.close()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.dev.close()

    def test_enumerates_the_package(self):
        names = shipped_configs()
        for want in ("default.yaml", "mini.yaml", "mini_textbased.yaml"):
            self.assertIn(want, names)
        for name in list(OVERLAYS) + list(EXCLUDED):
            self.assertIn(name, names, f"{name} is no longer shipped: drop it from OVERLAYS/EXCLUDED")

    def test_each_config_runs_to_submitted(self):
        for name in shipped_configs():
            with self.subTest(config=name):
                if name in EXCLUDED:
                    self.skipTest(f"{name}: {EXCLUDED[name]}")
                self.run_config(name)

    def run_config(self, name: str) -> None:
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.environments import get_environment

        config = load_config(name)
        agent_cfg = config.get("agent") or {}
        if "system_template" not in agent_cfg or "instance_template" not in agent_cfg:
            self.fail(f"{name} has no agent templates: name the configuration it extends in OVERLAYS, "
                      "or exclude it with the reason")

        env_cfg = {k: v for k, v in (config.get("environment") or {}).items() if k != "environment_class"}
        known = {f.name for f in dataclasses.fields(HelmrEnvironmentConfig)}
        foreign = sorted(set(env_cfg) - known)
        env_cfg.update(environment_class=HELMR_ENVIRONMENT, workspace=self.ws, server_url=self.dev.url, api_key=self.dev.api_key)
        if foreign:
            with self.assertLogs("minisweagent.environment", "WARNING") as logs:
                env = get_environment(env_cfg)
            self.assertIn(", ".join(foreign), "\n".join(logs.output))
        else:
            env = get_environment(env_cfg)
        self.assertIsInstance(env, HelmrEnvironment)

        # The directory the configuration works in, as its benchmark's
        # image has it (SWE-bench's /testbed): made in the sandbox's root.
        cwd = env.config.cwd
        if cwd.startswith("/"):
            made = env.execute({"command": f"mkdir -p {shlex.quote(cwd)}"}, cwd="/")
            self.assertEqual(made["returncode"], 0, f"{name}: cannot make its working directory {cwd} in a stock sandbox: {made}")
            where = cwd
        else:
            where = "/workspace" + (f"/{cwd}" if cwd else "")

        token = re.sub(r"[^a-z0-9]+", "-", name.lower())
        commands = [f"echo {token} > helmr-{token}.txt && pwd", f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat helmr-{token}.txt"]
        model, toolcalls = self.model_for(name, config, commands)

        agent = DefaultAgent(model, env, **agent_cfg)
        result = agent.run(f"Write {token} to a file and submit it.")
        self.assertEqual(result.get("exit_status"), "Submitted", f"{name}: {result}\n{json.dumps(agent.messages[-3:], indent=1, default=str)[-3000:]}")
        self.assertEqual(result.get("submission"), f"{token}\n")

        # The prompts rendered with the sandbox's own uname.
        prompts = "\n".join(str(m.get("content")) for m in agent.messages[:2])
        self.assertNotIn("{{", prompts)
        templates = (agent_cfg["system_template"] + agent_cfg["instance_template"]).replace(" ", "")
        if "{{task}}" in templates:  # benchmarks' own prompts may carry their instance instead
            self.assertIn(token, prompts)
        if "{{release}}" in templates:
            self.assertIn(self.uname, prompts, f"{name}: the prompts do not carry the sandbox's uname {self.uname!r}")

        # The first action's observation, through the configuration's own
        # observation template and message shape.
        observations = [m for m in agent.messages if "raw_output" in (m.get("extra") or {})]
        self.assertEqual(len(observations), 1, f"{name}: {observations}")
        obs = observations[0]
        self.assertEqual((obs["extra"]["returncode"], obs["extra"]["raw_output"]), (0, where + "\n"), name)
        self.assertIn(where, obs["content"])
        if toolcalls:
            self.assertEqual((obs["role"], obs["tool_call_id"]), ("tool", "call_1"))
        else:
            self.assertEqual(obs["role"], "user")
        self.assertNotIn(self.dev.api_key, json.dumps(agent.serialize(), default=str))

    def model_for(self, name: str, config: dict, commands: list[str]):
        """The deterministic model answering commands in the configuration's format."""
        from minisweagent.models.litellm_textbased_model import LitellmTextbasedModelConfig
        from minisweagent.models.test_models import DeterministicModel, DeterministicToolcallModel

        model_cfg = config.get("model") or {}
        agent_cfg = config["agent"]
        kwargs = {"observation_template": model_cfg["observation_template"]} if "observation_template" in model_cfg else {}
        fmt = model_cfg.get("format_error_template", "format error: {{error}}")
        regex = model_cfg.get("action_regex")
        if regex is None and "mswea_bash_command" in agent_cfg["system_template"] + agent_cfg["instance_template"]:
            regex = LitellmTextbasedModelConfig.model_fields["action_regex"].default
        if regex is not None:
            outputs = [self.text_output(name, regex, fmt, c) for c in commands]
            return DeterministicModel(outputs=outputs, **kwargs), False
        outputs = [self.toolcall_output(fmt, i + 1, c) for i, c in enumerate(commands)]
        return DeterministicToolcallModel(outputs=outputs, **kwargs), True

    def text_output(self, name: str, regex: str, fmt: str, command: str) -> dict:
        from minisweagent.exceptions import FormatError
        from minisweagent.models.test_models import make_output
        from minisweagent.models.utils.actions_text import parse_regex_actions

        for content in (f"THOUGHT: the next step.\n\n```mswea_bash_command\n{command}\n```",
                        f"The next step.\n\n<mswea_bash_command>{command}</mswea_bash_command>"):
            try:
                actions = parse_regex_actions(content, action_regex=regex, format_error_template=fmt)
            except FormatError:
                continue
            if actions == [{"command": command}]:
                return make_output(content, actions, cost=0.0)
        self.fail(f"{name}: neither a ```mswea_bash_command``` block nor a <mswea_bash_command> element "
                  f"matches its action_regex {regex!r}: teach this test the configuration's format")

    def toolcall_output(self, fmt: str, n: int, command: str) -> dict:
        from minisweagent.models.test_models import make_toolcall_output
        from minisweagent.models.utils.actions_toolcall import parse_toolcall_actions

        call = {"id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
        parsed = SimpleNamespace(id=call["id"], function=SimpleNamespace(**call["function"]))
        actions = parse_toolcall_actions([parsed], format_error_template=fmt)
        self.assertEqual(actions, [{"command": command, "tool_call_id": call["id"]}])
        out = make_toolcall_output(None, [call], actions)
        out["extra"]["cost"] = 0.0  # the configurations' cost limits count the scripted calls otherwise
        return out


if __name__ == "__main__":
    unittest.main()
