#!/usr/bin/env bash
# Wheels of the packages moss needs that the lent GPU machine's Python (3.12, with its own CUDA
# torch) lacks, into .whl/ (ignored by git; carried to the machine by the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --dest .whl soundfile soxr cffi pycparser
ls .whl
