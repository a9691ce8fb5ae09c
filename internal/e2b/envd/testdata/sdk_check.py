"""Drives Helmr's envd with the published E2B Python SDK (e2b 2.63.0).

Usage: python sdk_check.py ENVD_URL WORKSPACE_DIR ENVD_VERSION
Prints "ok" when every check passed; raises otherwise.
"""
import sys

from packaging.version import Version

from e2b import ConnectionConfig, Sandbox
from e2b.exceptions import InvalidArgumentException, NotFoundException
from e2b.sandbox.commands.command_handle import CommandExitException

url, wsdir, version = sys.argv[1], sys.argv[2], sys.argv[3]
headers = {"E2b-Sandbox-Id": "ws_1", "E2b-Sandbox-Port": "49983"}
cc = ConnectionConfig(api_key="unused", sandbox_url=url, extra_sandbox_headers=headers)
sbx = Sandbox(sandbox_id="ws_1", sandbox_domain=None, envd_version=Version(version),
              envd_access_token=None, traffic_access_token=None, connection_config=cc)

assert sbx.is_running(), "is_running"

out = []
r = sbx.commands.run("echo hi; echo err >&2; echo $A", envs={"A": "b"}, on_stdout=out.append)
assert r.exit_code == 0 and r.stdout == "hi\nb\n" and r.stderr == "err\n", r
assert "".join(out) == "hi\nb\n", out

try:
    sbx.commands.run("echo before; exit 3")
    raise AssertionError("exit 3 did not raise")
except CommandExitException as e:
    assert e.exit_code == 3 and e.stdout == "before\n", e

h = sbx.commands.run("echo up; exec sleep 60", background=True)
assert any(p.pid == h.pid for p in sbx.commands.list()), "list"
assert sbx.commands.kill(h.pid), "kill"
try:
    h.wait()
    raise AssertionError("a killed command did not raise")
except CommandExitException as e:
    assert e.exit_code != 0, e
assert not sbx.commands.kill(h.pid), "kill of an ended command"

info = sbx.files.write("a/b.txt", "data")
assert info.path == wsdir + "/a/b.txt", info
assert sbx.files.read("a/b.txt") == "data"
assert sbx.files.read(wsdir + "/a/b.txt", format="bytes") == bytearray(b"data")
sbx.files.write_files([{"path": "m/one.txt", "data": "1"}, {"path": wsdir + "/m/two.txt", "data": b"\x00\xff"}])
assert sbx.files.read("m/two.txt", format="bytes") == bytearray(b"\x00\xff")
names = sorted(e.name for e in sbx.files.list("m"))
assert names == ["one.txt", "two.txt"], names
assert sbx.files.exists("a/b.txt") and not sbx.files.exists("nope")
assert sbx.files.get_info("a/b.txt").size == 4
assert sbx.files.make_dir("d") and not sbx.files.make_dir("d")
moved = sbx.files.rename("a/b.txt", "d/c.txt")
assert moved.path == wsdir + "/d/c.txt", moved
sbx.files.remove("d")
assert not sbx.files.exists("d")

for bad in ("/etc/passwd", "../x"):
    try:
        sbx.files.read(bad)
        raise AssertionError("read %s did not raise" % bad)
    except InvalidArgumentException:
        pass
    try:
        sbx.files.get_info(bad)
        raise AssertionError("get_info %s did not raise" % bad)
    except InvalidArgumentException:
        pass
try:
    sbx.files.read("missing")
    raise AssertionError("read missing did not raise")
except NotFoundException:
    pass

print("ok")
