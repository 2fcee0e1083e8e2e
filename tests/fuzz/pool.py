"""A pool of persistent worker processes (worker.py) that run fuzz cases with a per-case timeout.

A worker that dies (a signal: segfault, abort) is a CRASH, one that does not answer in time a
HANG (it is asked for its Python stack with SIGUSR1, then killed); either way a fresh worker
replaces it. Workers are also replaced every `recycle` cases to bound the memory that compiled
programs and caches accumulate.
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
from .worker import recv, send

TESTS_DIR = Path(__file__).resolve().parents[1]
HISTORY = 30
_BOOT = ("import sys; sys.path.insert(0, {tests!r}); sys.path.insert(0, {root!r}); "
         "from fuzz.worker import main; main()")


class Worker:
    """One worker process and the file its faulthandler writes to."""

    def __init__(self, scratch: str) -> None:
        fd, self.dump_path = tempfile.mkstemp(prefix="fuzz-worker-", suffix=".txt", dir=scratch)
        os.close(fd)
        env = dict(os.environ, HLOFUSE_FUZZ_DUMP=self.dump_path, PYTHONFAULTHANDLER="0")
        env.setdefault("JAX_PLATFORMS", "cpu")
        boot = _BOOT.format(tests=str(TESTS_DIR), root=str(TESTS_DIR.parent))
        self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.cases = 0
        self.case: dict[str, Any] | None = None
        # The cases this process ran before: a crash may come from memory an earlier case corrupted.
        self.history: list[dict[str, Any]] = []
        self.started = 0.0

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


def run_cases(cases: Iterable[dict[str, Any]], jobs: int, timeout: float,
              on_result: Callable[[dict[str, Any], Any], None], recycle: int = 300) -> None:
    """Run every case (a dict with a "payload" to send to the worker) on `jobs` workers; call
    `on_result(case, result)` with the worker's result, or a crash/hang result dict."""
    scratch = tempfile.mkdtemp(prefix="hlofuse-fuzz-")
    pending = iter(cases)
    idle: list[Worker] = [Worker(scratch) for _ in range(max(1, jobs))]
    busy: dict[int, Worker] = {}
    exhausted = False
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
                    on_result(case, {"outcome": oc.CRASH, "stage": "worker",
                                     "signature": f"{sig} at {oc.signature_from_dump(dump)}",
                                     "message": f"worker died ({sig}) after {w.cases - 1} earlier cases",
                                     "traceback": dump[-4000:], "history": w.history})
                    w.stop()
                    w.remove_files()
                    idle.append(Worker(scratch))
                    continue
                on_result(case, result)
                if w.cases >= recycle:
                    w.stop()
                    w.remove_files()
                    w = Worker(scratch)
                idle.append(w)
            now = time.monotonic()
            for fd, w in list(busy.items()):
                if now - w.started > timeout:
                    del busy[fd]
                    w.stop(hung=True)
                    dump = w.dump()
                    on_result(w.case, {"outcome": oc.HANG, "stage": "worker",
                                       "signature": f"timeout at {oc.signature_from_dump(dump)}",
                                       "message": f"no answer in {timeout:g} s", "traceback": dump[-4000:],
                                       "history": w.history})
                    w.remove_files()
                    idle.append(Worker(scratch))
    finally:
        for w in idle + list(busy.values()):
            w.stop()
            w.remove_files()
        try:
            os.rmdir(scratch)
        except OSError:
            pass
