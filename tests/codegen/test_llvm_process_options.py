"""LLVM's process-wide switches (emitters/cpu/target.set_process_options), and modules on
which LLVM's own walks once took exponential time.

LLVM 21's CRC recognizer in loop idiom recognition (HashRecognize) walks each loop-carried
value's operand tree without memoizing shared operands; the graph fuzzer (seed 30) found a
small module whose emulated-GPU max-reduction over bf16 atan2(sin(x), x) kept O1's loop-idiom
pass busy for more than 20 minutes (gdb: RecurrenceInfo::digRecurrence). With the recognizer
off it compiles in about a second. The module runs in a child process under a deadline, so a
return of the slow path fails the test instead of hanging the suite."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from repo_paths import REPO

SLOW_FOR_HASH_RECOGNIZE = """HloModule fuzz_graph
red {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] maximum(a, b)
}
ENTRY main {
  x = bf16[4,1,2] parameter(0)
  s = bf16[4,1,2] sine(x)
  t = bf16[4,1,2] atan2(s, x)
  c = bf16[] constant(-inf)
  ROOT m = bf16[] reduce(t, c), dimensions={0,1,2}, to_apply=red
}
"""

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import ml_dtypes
    import hlofuse
    text = sys.stdin.read()
    x = np.linspace(-3, 3, 8).astype(ml_dtypes.bfloat16).reshape(4, 1, 2)
    want = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(x)[0])
    for target in ("gpu-emulated", "cpu"):
        got = np.asarray(hlofuse.compile(hlofuse.parse_hlo(text), target=target, cache=False)(x)[0])
        assert got.tobytes() == want.tobytes(), (target, got, want)
    print("ok")
""")


def test_reduction_over_a_deep_body_compiles_in_bounded_time():
    # ~1-3 s on the 2-core hosts; the deadline leaves a wide margin and still fails the slow path
    r = subprocess.run([sys.executable, "-c", CHILD], input=SLOW_FOR_HASH_RECOGNIZE, text=True,
                       capture_output=True, timeout=120, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# The HLO graph fuzzer, seed 42: the min of two f16 elements (one output), then cbrt and atan2 in
# the reduction's epilogue. The loop over outputs, every value in it loop-invariant, was left to
# LLVM 22's loop vectorizer, whose VPlan uniformity check (vputils::isUniformAcrossVFsAndUFs,
# gdb) walked the operand DAG of the f64 approximations without remembering what it saw: more
# than 120 s at O2 and O3. A loop over fewer outputs than a vector's lanes is no longer offered
# to the vectorizer (codegen/kernels/cpu_reduction.py): under a second.
SLOW_FOR_VPLAN = """HloModule fuzz_graph
red_minimum_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] minimum(a, b)
}
ENTRY main {
  v0 = f16[2] parameter(0)
  v1 = f32[2] convert(v0)
  v2 = f32[] constant(inf)
  v3 = f32[] reduce(v1, v2), dimensions={0}, to_apply=red_minimum_f32
  v4 = f32[] cbrt(v3)
  v5 = f16[2] clamp(v0, v0, v0)
  v6 = f32[] constant(-2.5)
  v7 = f32[] atan2(v6, v4)
  v8 = f16[2] ceil(v5)
  v9 = f32[] parameter(1)
  v10 = pred[] compare(v6, v9), direction=LT
  ROOT out = (f32[], f16[2], pred[]) tuple(v7, v8, v10)
}
"""

CHILD_VPLAN = textwrap.dedent("""
    import sys
    import numpy as np
    import hlofuse
    text = sys.stdin.read()
    args = [np.array([-0.75, 2.5], np.float16), np.float32(1.5)]
    want = hlofuse.compile(hlofuse.parse_hlo(text), target="interpreter")(*args)
    got = hlofuse.compile(hlofuse.parse_hlo(text), target="cpu", cache=False)(*args)
    for g, w in zip(got, want):
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes(), (g, w)
    print("ok")
""")


def test_reduction_to_one_output_under_a_deep_epilogue_compiles_in_bounded_time():
    # ~1 s on the 2-core hosts; the deadline fails the slow path instead of hanging the suite
    r = subprocess.run([sys.executable, "-c", CHILD_VPLAN], input=SLOW_FOR_VPLAN, text=True,
                       capture_output=True, timeout=60, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
