"""A small client for the Helmr API: what the adapters need."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class HelmrError(Exception):
    """An API request Helmr refused or could not serve."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"helmr: {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class Client:
    """Calls a Helmr control plane with an API key (or the owner credential).

    url and api_key default to HELMR_URL and HELMR_API_KEY.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, timeout: float = 600):
        self.url = (url or os.environ.get("HELMR_URL") or "http://127.0.0.1:8480").rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("HELMR_API_KEY", "")
        self.timeout = timeout

    def __repr__(self) -> str:  # never the key
        return f"Client(url={self.url!r})"

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)["error"]
                raise HelmrError(e.code, err.get("code", ""), err.get("message", "")) from None
            except (ValueError, KeyError, TypeError):
                raise HelmrError(e.code, "http_error", raw.decode("utf-8", "replace")[:500]) from None
        return json.loads(raw) if raw else None

    def exec(self, workspace: str, *, command: str | None = None, argv: list[str] | None = None,
             cwd: str = "", env: dict[str, str] | None = None, stdin: str = "",
             timeout: float | None = None) -> dict[str, Any]:
        """Runs one command in a workspace; returns Helmr's exec result."""
        body: dict[str, Any] = {}
        if command is not None:
            body["command"] = command
        if argv is not None:
            body["argv"] = argv
        if cwd:
            body["cwd"] = cwd
        if env:
            body["env"] = env
        if stdin:
            body["stdin"] = stdin
        if timeout:
            body["timeoutSeconds"] = timeout
        wait = (timeout or 60) + 180  # the worker may start the workspace's sandbox first
        return self.request("POST", f"/v1/workspaces/{urllib.parse.quote(workspace, safe='')}/exec", body, timeout=wait)
