"""SWE-agent 1.x's own sequence of SWE-ReX calls, replayed with the pinned
swe-rex against a workspace's `/v1/swerex/ws_…` on a stock sandbox (a
workspace of a task on the built-in base image), as
`sweagent run --env.deployment.type=remote --env.deployment.host=URL
--env.deployment.auth_token=KEY` makes them.

The order and arguments follow SWE-agent's SWEEnv (start, reset, repository
copy and reset), ToolHandler (bundle upload and install, reset, state) and
agent loop (actions with check set, a syntax error, a timeout and its
interrupt, submission); the tool bundles are small stand-ins with the same
layout (bin/ of Python scripts, install.sh, lib/), not SWE-agent's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helmr_dev import HelmrDev  # noqa: E402

try:
    import swerex  # noqa: F401

    HAVE_SWEREX = True
except ImportError:
    HAVE_SWEREX = False

REPO = "helmr-demo"  # uploaded to /helmr-demo, as SWE-agent uploads a local repository to /{repo_name}

# Stand-ins for SWE-agent's bundles (tools/registry, tools/edit_anthropic,
# tools/review_on_submit_m): the same layout and the same contract (a
# registry file read by Python tools, a state command writing
# /root/state.json, a submit writing /root/model.patch).
BUNDLES = {
    "registry": {
        "install.sh": 'bundle_dir=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )\n'
                      'export PYTHONPATH="$bundle_dir/lib${PYTHONPATH:+:$PYTHONPATH}"\n',
        "lib/registry.py": "import json, os\n"
                           "PATH = os.environ.get('SWE_AGENT_ENV_FILE', '/root/.swe-agent-env')\n"
                           "def get(key, default=None):\n"
                           "    with open(PATH) as f:\n"
                           "        return json.load(f).get(key, default)\n",
        "bin/_read_env": "#!/usr/bin/env python3\nimport sys\nfrom registry import get\nprint(get(sys.argv[1], ''))\n",
    },
    "edit": {
        "bin/_state_edit": "#!/usr/bin/env python3\nimport json, os\n"
                           "json.dump({'working_dir': os.getcwd()}, open('/root/state.json', 'w'))\n",
    },
    "submit": {
        "bin/submit": "#!/usr/bin/env python3\nimport os, subprocess\n"
                      "subprocess.run('git add -A && git diff --cached > /root/model.patch', shell=True, cwd=os.environ['ROOT'], check=True)\n"
                      "print('<<SWE_AGENT_SUBMISSION>>')\n",
    },
}
COMMANDS = ["_read_env", "_state_edit", "submit"]


def make_bundles(root: Path) -> list[Path]:
    out = []
    for name, files in BUNDLES.items():
        for rel, text in files.items():
            p = root / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        out.append(root / name)
    return out


def make_repository(root: Path) -> Path:
    repo = root / REPO
    repo.mkdir()
    (repo / "README.md").write_text("demo\n")
    (repo / "app.py").write_text("print('hello')\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "initial"], check=True)
    return repo


@unittest.skipUnless(HAVE_SWEREX or os.environ.get("HELMR_REQUIRE_ALL"), "swe-rex is not installed (scripts/python-adapters.sh installs it)")
class SweAgentSequenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dev = HelmrDev()
        try:
            cls.ws = cls.dev.workspace()
        except Exception:
            cls.dev.close()
            raise
        cls.host = f"{cls.dev.url}/v1/swerex/{cls.ws}"

    @classmethod
    def tearDownClass(cls) -> None:
        cls.dev.close()

    def test_sweagent_call_sequence(self):
        asyncio.run(self.sequence())

    async def sequence(self):
        from swerex.deployment.config import RemoteDeploymentConfig, get_deployment
        from swerex.exceptions import BashIncorrectSyntaxError, CommandTimeoutError, NonZeroExitCodeError
        from swerex.runtime.abstract import (
            BashAction,
            BashInterruptAction,
            Command,
            CreateBashSessionRequest,
            ReadFileRequest,
            UploadRequest,
            WriteFileRequest,
        )

        # SWE-agent takes the whole URL as its host, and no port.
        deployment = get_deployment(RemoteDeploymentConfig(host=self.host, auth_token=self.dev.api_key))
        await deployment.start()
        rt = deployment.runtime

        async def communicate(command: str, timeout: float = 25) -> str:
            """SWEEnv.communicate(check="raise")."""
            obs = await rt.run_in_session(BashAction(command=command, timeout=timeout, check="silent"))
            self.assertEqual(obs.exit_code, 0, f"{command!r}: {obs.output}")
            return obs.output

        with self.subTest("session"):
            # SWEEnv._init_deployment
            await rt.create_session(CreateBashSessionRequest(startup_source=["/root/.bashrc"]))
            await communicate("export LANG=C.UTF-8 && export LC_ALL=C.UTF-8")

        with self.subTest("repository"):
            # SWEEnv.reset: the repository copied to /{repo_name}, then reset.
            await communicate("cd /")
            self.assertNotIn(REPO, (await communicate("ls")).split("\n"))
            with tempfile.TemporaryDirectory() as tmp:
                repo = make_repository(Path(tmp))
                await rt.upload(UploadRequest(source_path=str(repo), target_path=f"/{REPO}"))
            r = await rt.execute(Command(command=f"chown -R root:root /{REPO}", shell=True))
            self.assertEqual(r.exit_code, 0, r)
            await communicate(" && ".join([f"cd /{REPO}", "export ROOT=$(pwd -P)", "git fetch", "git status", "git restore .",
                                           "git reset --hard", "git checkout HEAD", "git clean -fdq"]), timeout=120)

        with self.subTest("tool bundles"):
            # ToolHandler.install: bundles uploaded at once to /root/tools/<bundle>,
            # each installed in the session, the commands checked with `which`.
            env_variables = {"PAGER": "cat", "MANPAGER": "cat", "LESS": "-R", "PIP_PROGRESS_BAR": "off", "TQDM_DISABLE": "1", "GIT_PAGER": "cat"}
            await communicate(" && ".join(f"export {k}={v}" for k, v in env_variables.items()))
            cwd = (await communicate("pwd")).strip()
            self.assertEqual(cwd, f"/{REPO}")
            with tempfile.TemporaryDirectory() as tmp:
                bundles = make_bundles(Path(tmp))
                await asyncio.gather(*(rt.upload(UploadRequest(source_path=str(b), target_path=f"/root/tools/{b.name}")) for b in bundles))
                for b in bundles:
                    cmds = [f"export PATH=/root/tools/{b.name}/bin:$PATH", f"chmod +x /root/tools/{b.name}/bin/*"]
                    if (b / "install.sh").exists():
                        cmds.append(f"cd /root/tools/{b.name} && source install.sh")
                    cmds.append(f"chmod +x /root/tools/{b.name}/bin/*")
                    await communicate(" && ".join(cmds), timeout=300)
            await communicate(f"cd {cwd}")
            path = (await communicate("echo $PATH")).strip()
            self.assertIn("/root/tools/submit/bin", path)
            found = await asyncio.gather(*(rt.execute(Command(command=f"which {c}", shell=True, check=True, env={"PATH": path})) for c in COMMANDS))
            self.assertEqual([f.stdout.strip() for f in found], [f"/root/tools/{b}/bin/{c}" for b, c in zip(BUNDLES, COMMANDS)])

        with self.subTest("tools reset"):
            # ToolHandler.reset: the registry and the state file written, the
            # reset commands (none: an empty command) run in the session.
            await rt.write_file(WriteFileRequest(path="/root/.swe-agent-env", content=json.dumps({"GREETING": "hello from the registry"})))
            await rt.write_file(WriteFileRequest(path="/root/state.json", content="{}"))
            await communicate("")
            self.assertEqual((await communicate("_read_env GREETING")).strip(), "hello from the registry")

        with self.subTest("state and actions"):
            # The agent loop: the state command, then actions with check set.
            async def state() -> dict:
                await rt.run_in_session(BashAction(command="_state_edit", check="silent"))
                return json.loads((await rt.read_file(ReadFileRequest(path="/root/state.json"))).content)

            self.assertEqual(await state(), {"working_dir": f"/{REPO}"})
            await communicate("echo fixed >> README.md && python3 app.py")
            # A function and an unexported variable defined in one call, used in the next.
            await communicate('greet() { echo "hi $1 from $WHO"; }; WHO=bash')
            self.assertEqual((await communicate("greet there")).strip(), "hi there from bash")
            obs = await rt.run_in_session(BashAction(command="false", check="silent"))
            self.assertEqual(obs.exit_code, 1)

        with self.subTest("syntax error"):
            # A syntax error is refused before it runs, so the agent can re-ask.
            with self.assertRaises(BashIncorrectSyntaxError):
                await rt.run_in_session(BashAction(command="echo before; fi", timeout=25, check="silent"))
            self.assertEqual((await communicate("echo still here")).strip(), "still here")

        with self.subTest("timeout and interrupt"):
            # A timeout, then SWE-agent's interrupt: the shell and its state stay.
            with self.assertRaises(CommandTimeoutError):
                await rt.run_in_session(BashAction(command="sleep 300", timeout=2, check="silent"))
            await rt.run_in_session(BashInterruptAction())
            self.assertEqual((await communicate("greet again; pwd")).strip().split("\n"), ["hi again from bash", f"/{REPO}"])

        with self.subTest("large output"):
            # 1.2 MB of output followed by a failing command: the exit code is
            # the command's, whatever the output's size.
            with self.assertRaises(NonZeroExitCodeError) as cm:
                await rt.run_in_session(BashAction(command="seq 1 200000; false", timeout=60, check="raise"))
            self.assertRegex(str(cm.exception), r"exit code 1\b")
            obs = await rt.run_in_session(BashAction(command="seq 1 200000; false", timeout=60, check="silent"))
            self.assertEqual(obs.exit_code, 1)
            self.assertTrue(obs.output.startswith("1\n2\n3\n"), obs.output[:100])
            self.assertEqual((await communicate("greet after; pwd")).strip().split("\n"), ["hi after from bash", f"/{REPO}"])

        with self.subTest("concurrent calls"):
            # 40 calls at once on the one session: the server stays up and each
            # gets its own answer (one shell runs them one after another).
            answers = await asyncio.gather(*(rt.run_in_session(BashAction(command=f"echo call-{i}", timeout=120, check="silent"))
                                             for i in range(40)), return_exceptions=True)
            failed = [(i, a) for i, a in enumerate(answers) if isinstance(a, BaseException)]
            self.assertEqual(failed, [])
            self.assertEqual([(a.output.strip(), a.exit_code) for a in answers], [(f"call-{i}", 0) for i in range(40)])
            self.assertTrue((await rt.is_alive(timeout=60)).is_alive)

        with self.subTest("submission"):
            # Submission: the tool writes /root/model.patch, SWE-agent reads it.
            self.assertIn("<<SWE_AGENT_SUBMISSION>>", await communicate("submit"))
            patch = (await rt.read_file(ReadFileRequest(path="/root/model.patch", encoding="utf-8", errors="backslashreplace"))).content
            self.assertIn("+fixed", patch)
            self.assertEqual(await state(), {"working_dir": f"/{REPO}"})

        await deployment.stop()


if __name__ == "__main__":
    unittest.main()
