"""Helmr's SWE-ReX remote runtime, driven by the published swe-rex
client (RemoteRuntime) against a real helmr dev and sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
import unittest
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helmr_dev import HelmrDev  # noqa: E402

try:
    import swerex  # noqa: F401

    HAVE_SWEREX = True
except ImportError:
    HAVE_SWEREX = False


@unittest.skipUnless(HAVE_SWEREX or os.environ.get("HELMR_REQUIRE_ALL"), "swe-rex is not installed (scripts/python-adapters.sh installs it)")
class SwerexProtocolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dev = HelmrDev()
        try:
            cls.ws = cls.dev.workspace()
        except Exception:
            cls.dev.close()
            raise
        cls.base = f"{cls.dev.url}/v1/swerex/{cls.ws}"

    @classmethod
    def tearDownClass(cls) -> None:
        cls.dev.close()

    def runtime(self, token: str | None = None):
        from swerex.runtime.remote import RemoteRuntime

        return RemoteRuntime(host=self.base, auth_token=self.dev.api_key if token is None else token, timeout=60)

    def test_remote_runtime(self):
        from swerex.exceptions import CommandTimeoutError, NonZeroExitCodeError, SessionDoesNotExistError, SessionExistsError
        from swerex.runtime.abstract import (
            BashAction,
            CloseBashSessionRequest,
            Command,
            CreateBashSessionRequest,
            ReadFileRequest,
            UploadRequest,
            WriteFileRequest,
        )

        async def scenario():
            rt = self.runtime()
            self.assertTrue((await rt.is_alive()).is_alive)
            self.assertFalse((await self.runtime("hk_wrong").is_alive()).is_alive)

            await rt.create_session(CreateBashSessionRequest())
            with self.assertRaises(SessionExistsError):
                await rt.create_session(CreateBashSessionRequest())
            obs = await rt.run_in_session(BashAction(command="mkdir -p d && cd d && export FOO=bar && GREETING=hi; echo $GREETING"))
            self.assertEqual((obs.output.strip(), obs.exit_code), ("hi", 0))
            # The session keeps its directory and exported environment.
            obs = await rt.run_in_session(BashAction(command="pwd; echo $FOO; cat ../notes.txt"))
            self.assertEqual(obs.output.strip().splitlines(), ["/workspace/d", "bar", "from a run"])
            with self.assertRaises(NonZeroExitCodeError):
                await rt.run_in_session(BashAction(command="false"))
            obs = await rt.run_in_session(BashAction(command="echo out; echo err >&2; (exit 5)", check="silent"))
            self.assertEqual((obs.output.strip().splitlines(), obs.exit_code), (["out", "err"], 5))
            with self.assertRaises(CommandTimeoutError):
                await rt.run_in_session(BashAction(command="sleep 30", timeout=1))

            r = await rt.execute(Command(command=["echo", "a b"]))
            self.assertEqual((r.stdout, r.stderr, r.exit_code), ("a b\n", "", 0))
            r = await rt.execute(Command(command="echo out; echo err >&2; exit 2", shell=True, cwd="/tmp"))
            self.assertEqual((r.stdout, r.stderr, r.exit_code), ("out\n", "err\n", 2))
            r = await rt.execute(Command(command="pwd; echo $X", shell=True, cwd="/tmp", env={"X": "y"}, merge_output_streams=True))
            self.assertEqual(r.stdout, "/tmp\ny\n")
            with self.assertRaises(NonZeroExitCodeError):
                await rt.execute(Command(command=["false"], check=True))

            await rt.write_file(WriteFileRequest(path="/workspace/new/dir/f.txt", content="héllo\n"))
            self.assertEqual((await rt.read_file(ReadFileRequest(path="/workspace/new/dir/f.txt"))).content, "héllo\n")
            with self.assertRaises(FileNotFoundError):
                await rt.read_file(ReadFileRequest(path="/workspace/missing.txt"))

            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp, "tree")
                (src / "sub").mkdir(parents=True)
                (src / "sub" / "a.txt").write_text("A")
                (src / "b.bin").write_bytes(bytes(range(256)))
                await rt.upload(UploadRequest(source_path=str(src), target_path="/workspace/up"))
                Path(tmp, "one.txt").write_text("one")
                await rt.upload(UploadRequest(source_path=str(Path(tmp, "one.txt")), target_path="/workspace/one.txt"))
            r = await rt.execute(Command(command="cat up/sub/a.txt one.txt; echo; wc -c < up/b.bin; od -An -tx1 -j255 up/b.bin", shell=True, cwd="/workspace"))
            self.assertEqual(r.stdout.split(), ["Aone", "256", "ff"])

            # Larger than one operation carries: a repository-sized upload
            # (many files, one of several MiB) and a file of a few MiB
            # written and read back; nothing is left staged.
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp, "repo")
                (src / "many").mkdir(parents=True)
                big = os.urandom(3 << 20)
                (src / "big.bin").write_bytes(big)
                for i in range(300):
                    (src / "many" / f"{i}.txt").write_text(str(i))
                await rt.upload(UploadRequest(source_path=str(src), target_path="/workspace/repo"))
            r = await rt.execute(Command(command="sha256sum < repo/big.bin; ls repo/many | wc -l; cat repo/many/299.txt; echo; ls -A | grep -c helmr-upload", shell=True, cwd="/workspace"))
            self.assertEqual(r.stdout.split(), [hashlib.sha256(big).hexdigest(), "-", "300", "299", "0"])
            text = "é" * (1 << 20) + "end\n"
            await rt.write_file(WriteFileRequest(path="/workspace/big.txt", content=text))
            self.assertEqual((await rt.read_file(ReadFileRequest(path="/workspace/big.txt"))).content, text)

            await rt.close_session(CloseBashSessionRequest())
            with self.assertRaises(SessionDoesNotExistError):
                await rt.run_in_session(BashAction(command="true"))
            await rt.close()

        asyncio.run(scenario())

    def test_request_id_replay(self):
        def post(request_id: str) -> tuple[int, bytes]:
            req = urllib.request.Request(f"{self.base}/execute", method="POST",
                                         data=json.dumps({"command": "echo x >> /workspace/replay.txt; wc -l < /workspace/replay.txt", "shell": True}).encode(),
                                         headers={"X-API-Key": self.dev.api_key, "X-Request-ID": request_id, "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, resp.read()

        first = post("req-1")
        self.assertEqual(post("req-1"), first)  # a retry: the same answer, not a second run
        self.assertEqual(json.loads(first[1])["stdout"].strip(), "1")
        self.assertEqual(json.loads(post("req-2")[1])["stdout"].strip(), "2")


if __name__ == "__main__":
    unittest.main()
