#!/usr/bin/env bash
# Create .venv (if needed) and install edgeconv with every extra the tests use.
# torch is installed first, pinned, so that no other package can pull a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[all]"
echo "edgeconv installed in .venv ($(.venv/bin/edgeconv --version))"
