#!/usr/bin/env bash
# Set up .venv for moss: a CPU build of torch unless the venv already has a torch (GPU/NPU users
# install their own build first), then moss itself with the test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==2.13.0"
fi
.venv/bin/python -m pip install --quiet -e ".[test]"
