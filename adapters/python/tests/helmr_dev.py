"""Starts a real `helmr dev` (bin/helmr of this repository) for the
adapter tests, with a workspace to drive. It has its own data directory
and its own state root for the isolation tiers (never the machine's
/run/helmr), both removed when it closes."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


class HelmrDev:
    def __init__(self) -> None:
        helmr = REPO / "bin" / "helmr"
        if not helmr.exists():
            if os.environ.get("HELMR_REQUIRE_ALL"):
                raise RuntimeError(f"{helmr} is not built (run scripts/setup.sh)")
            raise unittest.SkipTest(f"{helmr} is not built (run scripts/setup.sh)")
        self.helmr = str(helmr)
        self.tmp = tempfile.mkdtemp(prefix="helmr-ad-")  # short: runsc's socket paths live below it
        os.chmod(self.tmp, 0o711)  # the process tier's sandboxes walk to their state by path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HELMR_") or k in ("HELMR_CACHE_DIR", "HELMR_RUNTIME")}
        self.env.update(HELMR_DATA_DIR=f"{self.tmp}/data", HELMR_PROFILE=f"{self.tmp}/profile.json", HELMR_ADDR="127.0.0.1:0",
                        HELMR_STATE_DIR=f"{self.tmp}/run")
        self.log = open(f"{self.tmp}/dev.log", "wb")
        self.proc = subprocess.Popen([self.helmr, "dev"], env=self.env, stdout=subprocess.PIPE, stderr=self.log, cwd=REPO)
        line = self.proc.stdout.readline().decode()
        m = re.match(r"Helmr dev at (\S+)", line)
        if not m:
            self.close()
            raise RuntimeError(f"helmr dev did not start: {line!r}; log: {Path(self.tmp, 'dev.log').read_text()}")
        self.url = m.group(1)
        self.env["HELMR_URL"] = self.url
        self.api_key = json.loads(Path(self.env["HELMR_PROFILE"]).read_text())["credential"]

    def cli(self, *args: str) -> str:
        out = subprocess.run([self.helmr, *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"helmr {' '.join(args)}: exit {out.returncode}: {out.stderr}")
        return out.stdout

    def workspace(self) -> str:
        """Deploys the e2e workspace project and returns the workspace of a finished run of it."""
        self.cli("deploy", "internal/e2e/testdata/workspace")
        run = json.loads(self.cli("run", "notes", "--project", "workspace", "--payload-json", '{"line": "from a run"}', "--json"))
        for _ in range(600):
            r = json.loads(self.cli("runs", "show", run["id"], "--json"))
            if r["status"] in ("COMPLETED", "FAILED", "TIMED_OUT", "CANCELED"):
                if r["status"] != "COMPLETED":
                    raise RuntimeError(f"run {run['id']} ended {r['status']}: {r.get('error')}")
                return r["workspaceId"]
            time.sleep(0.2)
        raise RuntimeError(f"run {run['id']} did not finish")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        _detach_mounts_under(self.tmp)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _detach_mounts_under(root: str) -> None:
    """Detaches whatever is still mounted below root (a workspace disk, a
    tier's state), deepest first, so that root can be removed."""
    try:
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for p in reversed(points):
        if p.startswith(root + "/"):
            libc.umount2(p.encode(), 2)  # MNT_DETACH
