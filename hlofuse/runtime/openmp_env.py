"""libgomp's wait policy, set before anything loads libgomp.

libgomp's threads spin for a while (GOMP_SPINCOUNT, 300,000 by default) before sleeping when
they wait for work. On a busy machine a spinning thread takes the core the thread doing the
work needs: a 24 MB row sum on two threads took 48 ms (median) under load 11 with the default,
0.70 ms with 1,000 spins and 0.76 ms with OMP_WAIT_POLICY=passive (benchmarks/run.py). So unless
the user chose a policy, threads spin briefly (enough for kernels launched back to back) and
then sleep.

libgomp reads the policy once, when it loads, and not only hlofuse loads it
(runtime/cpu_threads.py): a library linked against it loads it too (oneDNN,
runtime/gemm_provider.py). Loaded first by oneDNN, libgomp kept its 300,000 spins: scan_rnn on
two threads under load 7 took 1,865 ms a call (1,010 ms of CPU) against 208 ms with the spin
count set before. So both call `default_wait_policy()` before loading.
"""
from __future__ import annotations

import os

DEFAULT_SPINCOUNT = "1000"


def default_wait_policy() -> None:
    """Set GOMP_SPINCOUNT to the brief spin unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = DEFAULT_SPINCOUNT
