#!/usr/bin/env bash
# The accelerator checks as one prepared run (a lent GPU machine gives a session about
# 15 minutes in all, start included): `moss bench` at the v1.5 shapes, plain and with --compile
# (on CUDA a fixed-shape frame replays as a CUDA graph), each measuring the layout the GPU's probes
# choose (invariant), the fixed blocks of the batch's rows forced (blocks) and the fast mode at
# B = 1, 8 and 64; and the audit at --level bitwise, plain and compiled with the fixed blocks
# forced, on the device. Every step has its own time limit, so one slow step cannot eat the others;
# figures, reports and exit codes go to $OUT.
#
#   On the GPU machine (its python3 holds a CUDA torch; the few packages it lacks travel as wheels
#   in .whl/, made here by scripts/device_wheels.sh):   bash benchmarks/device_check.sh cuda
#   Rehearsal on a CPU, small and quick:               bash benchmarks/device_check.sh cpu tiny
set -uo pipefail
device=${1:-cuda}
preset=${2:-v1.5}
out=${OUT:-device-check}
py=${PYTHON:-python3}
mkdir -p "$out"
if [ -d .whl ]; then
    "$py" -m pip install -q --no-index --find-links .whl soundfile soxr 2>&1 | tail -2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
frames=32
batches=1,8,64
if [ "$preset" = tiny ]; then frames=8; batches=1,4; fi
summary="$out/summary.txt"
: > "$summary"

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $out/NAME.log, note the exit code
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - start)) s" | tee -a "$summary"
    tail -n 25 "$out/$name.log"
}

"$py" - <<'PY' > "$out/platform.txt" 2>&1
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__)
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
PY
command -v nvidia-smi > /dev/null && nvidia-smi >> "$out/platform.txt" 2>&1
cat "$out/platform.txt"

bench=("$py" -m moss_cli bench --random-weights "$preset" --device "$device" --dtype bfloat16
    --batch "$batches" --frames "$frames" --repeats 3 --modes invariant,blocks,fast)
step bench 100 "${bench[@]}" --json "$out/bench.json"
step bench-compile 240 "${bench[@]}" --compile --json "$out/bench-compile.json"
audit=("$py" -m moss_cli audit-determinism --device "$device" --level bitwise)
step audit 80 "${audit[@]}" --json "$out/audit.json" --markdown "$out/audit.md"
step audit-compile 150 "${audit[@]}" --compile --layout blocks --json "$out/audit-compile.json"
cat "$summary"
