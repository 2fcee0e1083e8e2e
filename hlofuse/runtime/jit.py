"""Loading machine code into this process: an MCJIT engine per program, from the host object
file codegen made (codegen/cpu.py) or from an optimized LLVM module (the emulated GPU kernels).

Builtins LLVM's code generator may call are registered first (jit_builtins.py), and every
external symbol of the object is checked before it is loaded: MCJIT would bind a missing one
to address 0.
"""
from __future__ import annotations

import threading
from typing import Iterable

import llvmlite.binding as llvm

from ..emitters.cpu.target import host_target_machine, new_host_target_machine
from .jit_builtins import check_resolvable, register_builtins, undefined_symbols

_lock = threading.Lock()


class JitModule:
    """Machine code loaded in an MCJIT engine: from an optimized module, an object file, or
    several object files (`objects`, one per kernel or group of kernels, codegen/cpu.py
    kernel_groups; each defines its own functions, and what they share, the half-conversion
    builtins, comes from `llvm.add_symbol`, jit_builtins.py). The kernels of a group share one
    object file: it is loaded once however often `objects` lists it."""

    def __init__(self, llmod: llvm.ModuleRef | None = None, object_code: bytes | None = None,
                 objects: Iterable[bytes] = ()) -> None:
        objects = list(dict.fromkeys(objects))  # equal bytes: one group's object, loaded once
        if object_code is not None:
            objects.append(object_code)
        if llmod is not None:
            # Through an object file, so its external symbols can be checked like a cached one's.
            objects.append(host_target_machine().emit_object(llmod))
        calls = [undefined_symbols(obj) for obj in objects]
        # the builtins and libraries these objects call (half conversions, BLAS ...) before any load
        register_builtins(None if any(c is None for c in calls) else set().union(*calls))
        tm = new_host_target_machine()  # owned (and freed) by the engine
        with _lock:
            empty = llvm.parse_assembly("")
            empty.triple = llvm.get_process_triple()
            self.engine = llvm.create_mcjit_compiler(empty, tm)
            # After the engine exists (it makes the process's symbols searchable): MCJIT binds
            # an unknown symbol to address 0, so a missing one must fail here, not segfault.
            for obj, names in zip(objects, calls):
                check_resolvable(obj, names)
            for obj in objects:
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()

    def address(self, name: str) -> int:
        """Address of the compiled function `name`."""
        addr = self.engine.get_function_address(name)
        if not addr:
            raise KeyError(f"no compiled function {name}")
        return addr
