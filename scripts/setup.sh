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
# `moss-cli` was this project's old distribution name (taken on the index by an unrelated project
# that may also install a `moss` command): drop it so only moss-tts-repro provides `moss`.
.venv/bin/python -m pip uninstall --quiet --yes moss-cli 2>/dev/null || true
.venv/bin/python -m pip install --quiet -e ".[test]"
# The vllm-omni 0.30.0 wheel, read (never installed or imported) by tests/integration/test_vllm_omni_fixture.py
# to check the fake server's request models against the real ones; the test skips without it.
if [ ! -f .cache/vllm-omni/vllm_omni-0.30.0-py3-none-any.whl ]; then
  .venv/bin/python -m pip download --no-deps --quiet vllm-omni==0.30.0 -d .cache/vllm-omni \
    || echo "note: could not download the vllm-omni 0.30.0 wheel; its model check in tests/integration/test_vllm_omni_fixture.py will skip"
fi
