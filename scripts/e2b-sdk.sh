#!/usr/bin/env bash
# Installs the published E2B Python SDK (the version proto/e2b pins) into a
# cached virtualenv for internal/e2b/envd's TestPythonSDK, and prints the
# line that points the test at it:
#
#   eval "$(scripts/e2b-sdk.sh)"   # exports HELMR_E2B_PYTHON
set -euo pipefail

want='e2b==2.63.0' # scripts/gen-e2b-proto.sh's E2B_PY_VERSION
venv=${HELMR_CACHE_DIR:-$HOME/.cache/helmr}/venv-e2b
if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$want" ]; then
  python3 -m venv "$venv" 2>/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  }
  "$venv/bin/pip" install -q --disable-pip-version-check "$want" >&2
  echo "$want" >"$venv/.installed"
fi
echo "export HELMR_E2B_PYTHON=$venv/bin/python"
