"""A pool of persistent worker processes (worker.py) that run fuzz cases with a per-case timeout.

A worker that dies (a signal: segfault, abort) is a CRASH; either way a fresh worker replaces
it. One that does not answer in time is asked for its Python stack with SIGUSR1 and killed, and
the case is run again on the interpreter alone (the oracle), in a fresh worker with the same
timeout, timed from when the interpreter starts running (parse, verify and compile have a
timeout of their own): if the interpreter finishes, the case is a HANG (a failure: the reference
answers, hlofuse's compiled path does not); if it does not finish either, the program itself runs
long (a decrementing loop counter, 2^31 iterations) and the case is LONG_RUNNING, not a failure.
Workers are also replaced every `recycle` cases to bound the memory that compiled programs and
caches accumulate.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from . import outcomes as oc
from .worker import STARTED, recv, send

TESTS_DIR = Path(__file__).resolve().parents[1]
SUPPORT_DIR = TESTS_DIR / "support"  # the test helper modules (xla_oracle for the edge fuzzer)
HISTORY = 30
_BOOT = ("import sys; sys.path.insert(0, {support!r}); sys.path.insert(0, {tests!r}); sys.path.insert(0, {root!r}); "
         "from fuzz.worker import main; main()")


class Worker:
    """One worker process and the file its faulthandler writes to."""

    def __init__(self, scratch: str) -> None:
        fd, self.dump_path = tempfile.mkstemp(prefix="fuzz-worker-", suffix=".txt", dir=scratch)
        os.close(fd)
        env = dict(os.environ, HLOFUSE_FUZZ_DUMP=self.dump_path, PYTHONFAULTHANDLER="0")
        env.setdefault("JAX_PLATFORMS", "cpu")
        boot = _BOOT.format(support=str(SUPPORT_DIR), tests=str(TESTS_DIR), root=str(TESTS_DIR.parent))
        # Unbuffered (bufsize=0): select() sees only the pipe, so nothing may wait in a reader's buffer.
        self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, bufsize=0)
        self.cases = 0
        self.case: dict[str, Any] | None = None
        # The cases this process ran before: a crash may come from memory an earlier case corrupted.
        self.history: list[dict[str, Any]] = []
        self.started = 0.0
        # For a worker running the interpreter on a case that timed out: (that case, its HANG
        # result), and whether the interpreter has started running (its STARTED arrived).
        self.recheck: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.reference_running = False

    def submit(self, case: dict[str, Any]) -> None:
        if self.case is not None:
            self.history = (self.history + [self.case])[-HISTORY:]
        self.case = case
        self.started = time.monotonic()
        self.cases += 1
        send(self.proc.stdin, case["payload"])

    def dump(self) -> str:
        try:
            return Path(self.dump_path).read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, hung: bool = False) -> None:
        """End this worker (it was started by this pool; only it is signalled)."""
        if self.proc.poll() is None:
            if hung:
                try:
                    self.proc.send_signal(signal.SIGUSR1)  # faulthandler writes the stack
                    time.sleep(0.3)
                except ProcessLookupError:
                    pass
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def remove_files(self) -> None:
        try:
            os.unlink(self.dump_path)
        except OSError:
            pass


def _reference_case(case: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"{case['id']}-reference", "payload": {"kind": "reference", "case": case["payload"]}}


def _long_running(hang: dict[str, Any], dump: str, timeout: float) -> dict[str, Any]:
    """The LONG_RUNNING result of a case whose HANG result is `hang` and on which the
    interpreter (its stack in `dump`) did not finish within `timeout` either."""
    return {"outcome": oc.LONG_RUNNING, "stage": "reference",
            "signature": f"the interpreter does not finish in {timeout:g} s either",
            "message": f"{hang['message']}, nor the interpreter alone (stopped at {oc.signature_from_dump(dump)})",
            "traceback": (f"Timed out ({hang['signature']}):\n{hang['traceback'][-2000:]}\n"
                          f"The interpreter alone, timed out:\n{dump[-2000:]}"),
            "history": hang["history"]}


def run_cases(cases: Iterable[dict[str, Any]], jobs: int, timeout: float,
              on_result: Callable[[dict[str, Any], Any], None], recycle: int = 300,
              reference_check: bool = True) -> None:
    """Run every case (a dict with a "payload" to send to the worker) on `jobs` workers; call
    `on_result(case, result)` with the worker's result, or a crash/hang/long-running result
    dict. With `reference_check`, a case that times out is run again on the interpreter alone
    (see the module docstring) before its result is given."""
    scratch = tempfile.mkdtemp(prefix="hlofuse-fuzz-")
    pending = iter(cases)
    idle: list[Worker] = [Worker(scratch) for _ in range(max(1, jobs))]
    busy: dict[int, Worker] = {}
    exhausted = False

    def retire(w: Worker) -> None:
        w.stop()
        w.remove_files()
        idle.append(Worker(scratch))

    try:
        while True:
            while idle and not exhausted:
                case = next(pending, None)
                if case is None:
                    exhausted = True
                    break
                w = idle.pop()
                try:
                    w.submit(case)
                except (BrokenPipeError, OSError):  # died while idle: replace and retry once
                    w.stop()
                    w.remove_files()
                    w = Worker(scratch)
                    w.submit(case)
                busy[w.proc.stdout.fileno()] = w
            if not busy:
                break
            now = time.monotonic()
            wait = max(0.05, min(w.started + timeout - now for w in busy.values()))
            ready, _, _ = select.select(list(busy), [], [], wait)
            for fd in ready:
                w = busy.pop(fd)
                case = w.case
                try:
                    result = recv(w.proc.stdout)
                except (EOFError, OSError):
                    w.proc.wait()
                    code = w.proc.returncode
                    dump = w.dump()
                    sig = signal.Signals(-code).name if code is not None and code < 0 else f"exit {code}"
                    if w.recheck is not None:  # the interpreter crashed on it: the timeout stays a HANG
                        orig, hang = w.recheck
                        hang["message"] += f"; the interpreter alone died ({sig})"
                        on_result(orig, hang)
                    else:
                        on_result(case, {"outcome": oc.CRASH, "stage": "worker",
                                         "signature": f"{sig} at {oc.signature_from_dump(dump)}",
                                         "message": f"worker died ({sig}) after {w.cases - 1} earlier cases",
                                         "traceback": dump[-4000:], "history": w.history})
                    retire(w)
                    continue
                if w.recheck is not None:
                    if result == STARTED:  # the interpreter runs from now: time it from here
                        w.started = time.monotonic()
                        w.reference_running = True
                        busy[fd] = w
                        continue
                    orig, hang = w.recheck
                    w.recheck, w.reference_running = None, False
                    hang["message"] += (f"; the interpreter alone finishes in {result['seconds']:.1f} s"
                                        f"{result['message']}")
                    on_result(orig, hang)
                else:
                    on_result(case, result)
                if w.cases >= recycle:
                    w.stop()
                    w.remove_files()
                    w = Worker(scratch)
                idle.append(w)
            now = time.monotonic()
            for fd, w in list(busy.items()):
                if now - w.started <= timeout:
                    continue
                del busy[fd]
                w.stop(hung=True)
                dump = w.dump()
                if w.recheck is None:
                    hang = {"outcome": oc.HANG, "stage": "worker",
                            "signature": f"timeout at {oc.signature_from_dump(dump)}",
                            "message": f"no answer in {timeout:g} s", "traceback": dump[-4000:],
                            "history": w.history}
                    if not reference_check:
                        on_result(w.case, hang)
                        retire(w)
                        continue
                    w.remove_files()
                    ref = Worker(scratch)
                    ref.recheck = (w.case, hang)
                    ref.submit(_reference_case(w.case))
                    busy[ref.proc.stdout.fileno()] = ref
                    continue
                orig, hang = w.recheck
                if w.reference_running:
                    on_result(orig, _long_running(hang, dump, timeout))
                else:  # parse, verify or compile hangs for the interpreter too: hlofuse's
                    hang["message"] += "; the interpreter's parse/verify/compile does not finish either"
                    on_result(orig, hang)
                retire(w)
    finally:
        for w in idle + list(busy.values()):
            w.stop()
            w.remove_files()
        try:
            os.rmdir(scratch)
        except OSError:
            pass
