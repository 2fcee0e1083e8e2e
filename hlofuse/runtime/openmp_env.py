"""libgomp's wait policy, set before anything loads libgomp.

libgomp's threads spin (GOMP_SPINCOUNT, 300,000 by default) before sleeping when they wait for
work, and so does the thread that waits at a parallel region's end for the others. On a busy
machine a spinning thread takes the core the thread doing the work needs: a 24 MB row sum on
two threads took 48 ms (median) under load 11 with the default, 0.70 ms with 1,000 spins and
0.76 ms with OMP_WAIT_POLICY=passive. But every wait spins, and a while loop starting one small
parallel region per iteration paid even 1,000 spins every time (each an iteration of a loop
around a PAUSE instruction, which takes tens of cycles on recent x86 cores). scan_rnn (768 iterations, one 50 us two-thread
GEMM each, the rest serial) under load 4-5, interleaved with XLA:CPU in benchmarks/run.py: 0
spins 45.9-46.4 ms, 1,000 spins 81.2-122.1 ms, 30,000 spins 1,576 ms (XLA 42-81 ms in the same
runs); softmax, layer_norm, batch_norm_train, resnet_add_relu, lstm_cell, attention, iou_matrix,
image_normalize_scatter, row_sums, gelu_tanh: no consistent difference at that load (geometric
means 0.55x and 0.55x, 0.42x and 0.69x against XLA). So unless the user chose a policy, threads
do not spin: they sleep at once (the futex wake-up is what a region costs on an idle machine).

libgomp reads the policy once, when it loads, and not only hlofuse loads it
(runtime/cpu_threads.py): a library linked against it loads it too (oneDNN,
runtime/gemm_provider.py). Loaded first by oneDNN, libgomp kept its 300,000 spins: scan_rnn on
two threads under load 7 took 1,865 ms a call (1,010 ms of CPU) against 208 ms with the spin
count set before. So both call `default_wait_policy()` before loading.
"""
from __future__ import annotations

import os

DEFAULT_SPINCOUNT = "0"


def default_wait_policy() -> None:
    """Set GOMP_SPINCOUNT to DEFAULT_SPINCOUNT unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = DEFAULT_SPINCOUNT


def workers_spin() -> bool:
    """Whether libgomp's waiting threads spin (so occupy a core) instead of sleeping: the user's
    OMP_WAIT_POLICY=active, or a GOMP_SPINCOUNT other than DEFAULT_SPINCOUNT's 0."""
    if os.environ.get("OMP_WAIT_POLICY", "").strip().lower() == "active":
        return True
    return os.environ.get("GOMP_SPINCOUNT", DEFAULT_SPINCOUNT).strip().lower() not in ("", "0")
