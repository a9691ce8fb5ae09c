"""examples/agent-loop against a real helmr dev, with its scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helmr_dev import REPO, HelmrDev  # noqa: E402

try:
    import minisweagent  # noqa: F401

    HAVE_UPSTREAM = True
except ImportError:
    HAVE_UPSTREAM = False


@unittest.skipUnless(HAVE_UPSTREAM or os.environ.get("HELMR_REQUIRE_ALL"), "mini-swe-agent is not installed (scripts/python-adapters.sh installs it)")
class AgentLoopExampleTest(unittest.TestCase):
    def test_agent_loop(self):
        dev = HelmrDev()
        try:
            ws = dev.workspace()
            dev.cli("exec", ws, "--shell", "--", "echo '# TODO: write tests' > app.py")
            env = {**dev.env, "HELMR_API_KEY": dev.api_key, "MSWEA_SILENT_STARTUP": "1"}
            out = subprocess.run([sys.executable, str(REPO / "examples" / "agent-loop" / "agent_loop.py"), "--workspace", ws, "collect the TODOs"],
                                 env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(out.returncode, 0, out.stderr)
            result = json.loads(out.stdout[out.stdout.index("{"):])
            self.assertEqual(result["exit_status"], "Submitted")
            self.assertIn("app.py:1:# TODO: write tests", result["submission"])
            self.assertIn("TODO: write tests", dev.cli("exec", ws, "--", "cat", "TODO.md"))
        finally:
            dev.close()


if __name__ == "__main__":
    unittest.main()
