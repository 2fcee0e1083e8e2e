#!/bin/bash
# The GPU backend's checks on a real CUDA GPU, in one run (a lent GPU machine's time is short):
#   1. versions of what the backend loads (numba-cuda, cuda.core, llvmlite, jaxlib) and the GPU;
#   2. the real-device tests (tests/runtime/test_gpu_device.py, skipped where there is no GPU);
#   3. every StableHLO conformance file on target gpu (hlofuse conformance --backend gpu);
#   4. random valid graphs on target gpu beside cpu, cpu without fusion and gpu-emulated, each
#      against the interpreter (python -m tests.fuzz --graphs N --gpu);
#   5. the benchmark workloads on the GPU beside XLA:GPU (benchmarks/gpu_device.py).
# Each stage has its own time limit and writes its log under OUTDIR; a failing stage does not
# stop the next. At most 8 files land in OUTDIR (a lent machine returns no more).
#
# usage: scripts/gpu_device_check.sh STABLEHLO_TESTDATA_DIR OUTDIR [GRAPHS]
# Environment: CONFORMANCE_FROM=NAME runs the conformance files from the first one whose name
# sorts at or after NAME, then wraps round to the start (so a run cut short by the machine's time
# covers the files an earlier run did not reach first); SECONDS_TESTS, SECONDS_CONFORMANCE,
# SECONDS_FUZZ and SECONDS_WORKLOADS override the stages' time limits.
set -u
data=${1:?usage: $0 STABLEHLO_TESTDATA_DIR OUTDIR [GRAPHS]}
out=${2:?usage: $0 STABLEHLO_TESTDATA_DIR OUTDIR [GRAPHS]}
graphs=${3:-300}
py=${PYTHON:-python3}
jobs=$(( $(nproc) > 2 ? $(nproc) - 2 : 1 ))
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HLOFUSE_CACHE_DIR=/tmp/hlofuse-gpu-check-cache

stage() {  # stage NAME SECONDS COMMAND...: run with a time limit, log to OUTDIR/NAME.txt
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    echo "stage $name: exit $rc in $((SECONDS - t0)) s; last lines:"
    tail -n 4 "$out/$name.txt" | sed 's/^/    /'
}

stage env 40 bash -c "nvidia-smi -L; $py -c '
import sys, importlib
print(sys.version)
for m in (\"numba\", \"numba_cuda\", \"cuda.core\", \"llvmlite\", \"jaxlib\", \"numpy\", \"ml_dtypes\", \"networkx\"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, \"__version__\", \"?\"))
    except Exception as e:
        print(m, \"MISSING\", e)
from numba import cuda
print(\"cuda available:\", cuda.is_available()); cuda.detect()
'"
stage device_tests "${SECONDS_TESTS:-90}" "$py" -m pytest -q -p no:cacheprovider -rs tests/runtime/test_gpu_device.py
stage workloads_gpu "${SECONDS_WORKLOADS:-150}" "$py" benchmarks/gpu_device.py --size large --rounds 5 --json "$out/workloads_gpu.json"
stage fuzz_graphs_gpu "${SECONDS_FUZZ:-110}" "$py" -m tests.fuzz --graphs "$graphs" --gpu --seed 7 --jobs "$jobs" --out /tmp/hlofuse-gpu-fuzz
[ -d /tmp/hlofuse-gpu-fuzz ] && tar czf "$out/fuzz_failures.tgz" -C /tmp hlofuse-gpu-fuzz
mapfile -t files < <(find "$data" -maxdepth 1 -name '*.mlir' | sort)
if [ -n "${CONFORMANCE_FROM:-}" ]; then
    later=() earlier=()
    for f in "${files[@]}"; do
        if [[ "$(basename "$f")" < "$CONFORMANCE_FROM" ]]; then earlier+=("$f"); else later+=("$f"); fi
    done
    files=("${later[@]}" "${earlier[@]}")
fi
stage conformance_gpu "${SECONDS_CONFORMANCE:-150}" "$py" -m hlofuse conformance "${files[@]}" --backend gpu --jobs "$jobs"
grep '^FAILED' "$out/conformance_gpu.txt" | head -n 40
