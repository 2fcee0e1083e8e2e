"""The worker process: reads cases from stdin, answers on the original stdout.

Messages are length-prefixed pickles. The worker's own fd 1 is pointed at /dev/null so that
anything the libraries print cannot corrupt the protocol; faulthandler writes the Python stack
of a crash (or, on SIGUSR1, of a hang) to the file the pool names, which the pool reads back
to give a crash or hang its signature.
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import struct
import sys
from typing import Any, BinaryIO, Callable

# The interim message a reference run sends when it starts running (see pool.py).
STARTED = {"phase": "running"}


def send(stream: BinaryIO, obj: Any) -> None:
    """Write one message (all of it: `stream` may be unbuffered, where a write can be partial)."""
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(struct.pack("<Q", len(body)) + body)
    while data:
        data = data[stream.write(data):]
    stream.flush()


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    """`n` bytes, reading as often as it takes (an unbuffered pipe returns what it has);
    EOFError when the other side is gone first."""
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(stream: BinaryIO) -> Any:
    """Read one message; EOFError when the other side is gone. The pool reads its workers'
    answers unbuffered: a buffered reader could hold a second message (a reference run's
    STARTED, then its answer) that select() on the pipe never reports."""
    (n,) = struct.unpack("<Q", _read_exact(stream, 8))
    return pickle.loads(_read_exact(stream, n))


def handle(case: dict[str, Any], notify: Callable[[Any], None]) -> Any:
    """Run one case (see cases.py and edge.py) and return its result(s); `notify` sends an
    interim message (a reference run's STARTED) before the result."""
    from . import cases, edge

    kind = case["kind"]
    if kind == "reference":
        inner = case["case"]
        if inner["kind"].startswith("selftest-"):  # the self-test's hangs hang only in the compiled path
            notify(STARTED)
            return {"finished": True, "seconds": 0.0, "message": ""}
        return cases.run_reference(inner, lambda: notify(STARTED))
    if kind == "malformed":
        return cases.run_malformed(case["text"], case["seed"])
    if kind == "graph":
        return cases.run_graph(case["text"], case["seed"])
    if kind == "edge":
        return edge.run_edge(case["text"], case["args"], case["outputs"], tuple(case["backends"]))
    if kind == "ping":
        return "pong"
    # For the harness's own tests: a case that kills its worker, and one that never finishes.
    if kind == "selftest-crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "selftest-hang":
        import time

        time.sleep(1e6)
    raise ValueError(f"unknown case kind {kind!r}")


def _harness_error(case: dict[str, Any], exc: Exception) -> Any:
    """The answer for an exception that escaped handle(): cases.py and edge.py classify whatever
    hlofuse raises, so this is a bug of the harness (an import that fails, a payload it cannot
    read). Answered as an unexpected exception with its traceback, not a silent "exit 1" of the
    worker; for a reference run, an answer that keeps the timed-out case a HANG (a failure)."""
    import traceback

    from . import outcomes as oc

    where = oc.exception_signature(exc)
    if case.get("kind") == "reference":
        return {"finished": True, "seconds": 0.0, "message": f" (harness error, no answer: {where}: {exc})"}
    return {"outcome": oc.UNEXPECTED, "stage": "harness", "signature": f"harness: {where}",
            "message": f"{type(exc).__name__}: {str(exc)[:500]}", "traceback": traceback.format_exc()[-4000:]}


def main() -> None:
    """Serve cases until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    inp = sys.stdin.buffer
    dump_path = os.environ.get("HLOFUSE_FUZZ_DUMP")
    if dump_path:
        dump = open(dump_path, "w")  # noqa: SIM115 - kept open for faulthandler for the life of the process
        faulthandler.enable(dump, all_threads=False)
        faulthandler.register(signal.SIGUSR1, dump, all_threads=False)
    import numpy as np

    np.seterr(all="ignore")  # numpy warnings on NaN/inf inputs are expected, not findings
    import warnings

    warnings.simplefilter("ignore")
    while True:
        try:
            case = recv(inp)
        except EOFError:
            return
        if dump_path:
            # Each case starts a fresh dump, so a crash's stack is the crashing case's.
            dump.seek(0)
            dump.truncate()
        try:
            result = handle(case, lambda msg: send(out, msg))
        except Exception as e:  # noqa: BLE001 - see _harness_error
            result = _harness_error(case, e)
        send(out, result)


if __name__ == "__main__":
    main()
