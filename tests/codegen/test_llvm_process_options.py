"""LLVM's process-wide switches (emitters/cpu/target.set_process_options).

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
