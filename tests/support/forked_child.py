"""Run a compiled program in a forked child (libgomp is not fork-safe: the child must run its
oneDNN primitives on one thread), returning what the child saw.

    got, threads = call_in_forked_child(exe, args)   # exe(*args)[0], and the thread counts
                                                      # of the oneDNN primitives in the child
"""
from __future__ import annotations

import multiprocessing as mp

from hlofuse.runtime import onednn_primitives


def call_in_forked_child(exe, args, timeout: float = 120.0):
    """(exe(*args)[0] computed in a forked child, the set of thread counts its oneDNN
    primitives' cells hold there); asserts the child exited cleanly."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()

    def child():
        queue.put((exe(*args)[0], {p.threads_cell.value for p in onednn_primitives._primitives.values()}))

    proc = ctx.Process(target=child)
    proc.start()
    got, threads = queue.get(timeout=timeout)
    proc.join(30)
    assert proc.exitcode == 0
    return got, threads
