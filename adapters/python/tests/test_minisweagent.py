"""The mini-swe-agent environment against a real helmr dev and sandbox,
and driven by the published mini-swe-agent's own agent loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helmr_adapters.minisweagent import HelmrEnvironment, Submitted  # noqa: E402

from helmr_dev import HelmrDev  # noqa: E402

try:
    import minisweagent  # noqa: F401

    HAVE_UPSTREAM = True
except ImportError:
    HAVE_UPSTREAM = False


class HelmrEnvironmentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dev = HelmrDev()
        try:
            cls.ws = cls.dev.workspace()
        except Exception:
            cls.dev.close()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.dev.close()

    def env(self, **kwargs) -> HelmrEnvironment:
        return HelmrEnvironment(server_url=self.dev.url, api_key=self.dev.api_key, workspace=self.ws, **kwargs)

    def test_output_merged_in_order_with_returncode(self):
        out = self.env().execute({"command": "cat notes.txt; echo to-stderr >&2; echo after; exit 4"})
        self.assertEqual(out, {"output": "from a run\nto-stderr\nafter\n", "returncode": 4, "exception_info": ""})

    def test_cwd_and_env(self):
        env = self.env(env={"GREETING": "hi"})
        self.assertEqual(env.execute({"command": "mkdir -p sub && echo $GREETING"})["output"], "hi\n")
        self.assertEqual(env.execute({"command": "pwd"}, cwd="sub")["output"], "/workspace/sub\n")
        self.assertEqual(env.execute({"command": "pwd"}, cwd="/tmp")["output"], "/tmp\n")
        self.assertEqual(self.env(cwd="sub").execute({"command": "pwd"})["output"], "/workspace/sub\n")

    def test_timeout(self):
        out = self.env().execute({"command": "echo started; sleep 30"}, timeout=1)
        self.assertEqual(out["returncode"], -1)
        self.assertIn("timed out after 1 seconds", out["exception_info"])
        self.assertEqual(out["output"], "started\n")

    def test_submit_sentinel(self):
        with self.assertRaises(Submitted) as cm:
            self.env().execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the answer"})
        self.assertEqual(cm.exception.messages[0]["extra"]["submission"], "the answer\n")
        # Not the first line, or a failing command: no submission.
        out = self.env().execute({"command": "echo x; echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
        self.assertEqual(out["returncode"], 0)
        out = self.env().execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 1"})
        self.assertEqual(out["returncode"], 1)

    def test_errors_are_observations(self):
        out = HelmrEnvironment(server_url=self.dev.url, api_key=self.dev.api_key, workspace="ws_nosuch").execute({"command": "ls"})
        self.assertEqual(out["returncode"], -1)
        self.assertIn("404", out["exception_info"])
        out = HelmrEnvironment(server_url=self.dev.url, api_key="hk_wrong", workspace=self.ws).execute({"command": "ls"})
        self.assertIn("401", out["exception_info"])

    def test_template_vars_from_the_sandbox(self):
        env = self.env(env={"GREETING": "hi"}, interpreter=["bash", "-c"])
        probes = []
        real = env.client.exec
        env.client.exec = lambda *a, **k: probes.append(k) or real(*a, **k)
        got = env.get_template_vars(task="t")
        self.assertEqual(env.get_template_vars(), {k: v for k, v in got.items() if k != "task"})
        self.assertEqual(len(probes), 1, "the sandbox's facts are read once")
        flags = {"system": "-s", "node": "-n", "release": "-r", "version": "-v", "machine": "-m"}
        for name, flag in flags.items():
            want = self.env().client.exec(self.ws, argv=["uname", flag])["stdout"].strip()
            self.assertEqual(got[name], want, f"template var {name}")
        self.assertEqual(got["system"], "Linux")
        self.assertIn("processor", got)
        # The sandbox's environment, as upstream's local environment gives
        # the harness machine's; then the configuration's fields.
        self.assertEqual((got["HOME"], got["PATH"]), ("/root", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"))
        self.assertEqual((got["env"], got["interpreter"], got["timeout"], got["cwd"]), ({"GREETING": "hi"}, ["bash", "-c"], 30, ""))
        self.assertEqual((got["workspace"], got["helmr_workspace"], got["task"]), (self.ws, self.ws, "t"))
        self.assertNotIn("api_key", got)

    def test_interpreter(self):
        out = self.env(interpreter=["bash", "-c"]).execute({"command": "echo $BASH_VERSION | cut -c1; shopt -q extglob; echo $?"})
        self.assertEqual((out["output"], out["returncode"]), ("5\n1\n", 0))
        out = self.env(interpreter=["python3", "-c"]).execute({"command": "import os, sys; print(os.getcwd()); sys.exit(3)"}, cwd="/tmp")
        self.assertEqual((out["output"], out["returncode"]), ("/tmp\n", 3))
        out = self.env(interpreter=["nosuch-shell", "-c"]).execute({"command": "true"})
        self.assertEqual(out["returncode"], 127, out)
        out = self.env().execute({"command": "pwd"}, cwd="/nonexistent")
        self.assertEqual(out["returncode"], 1)
        self.assertIn("/nonexistent", out["output"])

    def test_no_credential_in_serialized_state(self):
        env = self.env()
        blob = json.dumps([env.serialize(), env.get_template_vars(task="x"), repr(env.config), repr(env.client)])
        self.assertNotIn(self.dev.api_key, blob)
        self.assertEqual(env.serialize()["info"]["config"]["environment"]["workspace"], self.ws)
        self.assertEqual(env.serialize()["info"]["config"]["environment_type"], "helmr_adapters.minisweagent.HelmrEnvironment")

    @unittest.skipUnless(HAVE_UPSTREAM or os.environ.get("HELMR_REQUIRE_ALL"), "mini-swe-agent is not installed (scripts/python-adapters.sh installs it)")
    def test_upstream_agent_loop(self):
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.exceptions import Submitted as UpstreamSubmitted
        from minisweagent.models.test_models import DeterministicModel, make_output

        self.assertIs(Submitted, UpstreamSubmitted)
        model = DeterministicModel(outputs=[
            make_output("write it", [{"command": "echo 42 > answer.txt"}]),
            make_output("submit", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; cat answer.txt"}]),
        ])
        agent = DefaultAgent(model, self.env(), system_template="You work in {{helmr_workspace}} on {{system}}.",
                             instance_template="{{task}}")
        result = agent.run("compute the answer")
        self.assertEqual(result["exit_status"], "Submitted")
        self.assertEqual(result["submission"], "42\n")
        self.assertIn(self.ws, agent.messages[0]["content"])
        self.assertNotIn(self.dev.api_key, json.dumps(agent.serialize()))

    @unittest.skipUnless(HAVE_UPSTREAM or os.environ.get("HELMR_REQUIRE_ALL"), "mini-swe-agent is not installed (scripts/python-adapters.sh installs it)")
    def test_mini_cli(self):
        """The README's `mini` command line, with a scripted model in place of a language model."""
        outputs = [{"role": "assistant", "content": "Submit.", "extra": {"cost": 0.0, "actions": [
            {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; cat notes.txt; uname -s"}]}}]
        env = {**self.dev.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "HELMR_API_KEY": self.dev.api_key,
               "MSWEA_SILENT_STARTUP": "1", "MSWEA_CONFIGURED": "true"}
        with tempfile.TemporaryDirectory() as tmp:
            traj = Path(tmp, "traj.json")
            out = subprocess.run([str(Path(sys.executable).with_name("mini")), "-c", "mini.yaml",
                                  "-c", "environment.environment_class=helmr_adapters.minisweagent.HelmrEnvironment",
                                  "-c", f"environment.workspace={self.ws}",
                                  "--model-class", "deterministic", "-m", "deterministic", "-c", "model.outputs=" + json.dumps(outputs),
                                  "-y", "--exit-immediately", "-t", "read the notes", "-o", str(traj)],
                                 env={**env, "MSWEA_GLOBAL_CONFIG_DIR": tmp}, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
            self.assertEqual(out.returncode, 0, out.stdout[-2000:] + out.stderr[-2000:])
            text = traj.read_text()
        info = json.loads(text)["info"]
        self.assertEqual((info["exit_status"], info["submission"]), ("Submitted", "from a run\nLinux\n"))
        self.assertEqual(info["config"]["environment_type"], "helmr_adapters.minisweagent.HelmrEnvironment")
        self.assertNotIn(self.dev.api_key, text + out.stdout + out.stderr)


class HelmrEnvironmentConfigTest(unittest.TestCase):
    """Settings, checked before anything reaches a control plane."""

    def test_bad_settings_are_refused_clearly(self):
        cases = [
            ({}, "workspace is required"),
            ({"workspace": "ws_x", "interpreter": "bash -c"}, "interpreter must be a list"),
            ({"workspace": "ws_x", "interpreter": []}, "interpreter must be a list"),
            ({"workspace": "ws_x", "timeout": 0}, "timeout must be a positive number"),
            ({"workspace": "ws_x", "env": {"A-B": "1"}}, "'A-B' is not a valid variable name"),
            ({"workspace": "ws_x", "env": {"A": 1}}, "env A must be a string"),
        ]
        for kwargs, want in cases:
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(ValueError, want):
                HelmrEnvironment(**kwargs)

    def test_other_environments_settings_are_ignored_with_a_warning(self):
        with self.assertLogs("minisweagent.environment", "WARNING") as logs:
            env = HelmrEnvironment(workspace="ws_x", image="python:3.11", run_args=["--rm"], timeout=60)
        self.assertIn("ignores image, run_args", logs.output[0])
        self.assertEqual(env.config.timeout, 60)
        self.assertNotIn("image", env.serialize()["info"]["config"]["environment"])


if __name__ == "__main__":
    unittest.main()
