"""jaxlib's MLIR bindings for the StableHLO importer: contexts, parsing, CHLO legalization.

The bindings are imported from jaxlib itself, never through `jax`: importing jax takes about a
second, which was most of the time of importing a module from the command line. A context is
built as JAX builds its own (jax._src.interpreters.mlir.make_ir_context) and is reused by the
imports of a thread (building one took longer than parsing a mid-sized module), together with
what is cached per context (see ContextState).
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any

from ..hlo.errors import HloError, HloParseError


class StableHloImportError(HloError):
    """The StableHLO module could not be parsed or legalized."""


_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {}  # the dialect registry and the thread pool, built once per process

# A context is reused by the imports of one thread until it has parsed this many bytes: MLIR
# never frees the types, attributes and locations a context uniques, so a long-lived process
# importing many modules gets a fresh one now and then.
_CONTEXT_BYTES = 64 << 20
_PER_THREAD = threading.local()


_ORPHANED: list = []  # a forked child's copies of its parent's contexts and thread pool


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads, so the parent's MLIR thread pool (and
    contexts using it) would wait forever for work to be done: start afresh. The parent's
    objects are kept, never destroyed: destroying a pool joins threads that do not exist."""
    global _PER_THREAD, _LOCK
    _ORPHANED.append((_PER_THREAD, dict(_SHARED)))
    _PER_THREAD = threading.local()
    _LOCK = threading.Lock()
    passes = _SHARED.get("passes")  # registered in the process's pass registry, which the child has
    _SHARED.clear()
    if passes:
        _SHARED["passes"] = passes


os.register_at_fork(after_in_child=_after_fork_in_child)


def mlir_context():
    """A fresh MLIR context with the dialects of JAX's contexts (StableHLO, CHLO, MHLO, Shardy,
    func and the upstream dialects JAX registers)."""
    from jaxlib.mlir import ir
    # Registration needs only the dialects' C extensions, not their Python modules.
    from jaxlib.mlir._mlir_libs import _chlo, _jax_mlir_ext, _mlirHlo, _sdy, _sdyMpmd, _stablehlo

    with _LOCK:
        if "registry" not in _SHARED:
            registry = ir.DialectRegistry()
            _jax_mlir_ext.register_dialects(registry)
            _SHARED["registry"] = registry
            _SHARED["thread_pool"] = ir.ThreadPool()
    context = _bare_context_class(ir)()
    context.append_dialect_registry(_SHARED["registry"])
    context.load_all_available_dialects()
    context.set_thread_pool(_SHARED["thread_pool"])
    _sdy.register_dialect(context)
    _sdyMpmd.register_dialect(context)
    _mlirHlo.register_mhlo_dialect(context)
    _chlo.register_dialect(context)
    _stablehlo.register_dialect(context)
    return context


def _bare_context_class(ir):
    """ir.Context without its __init__, which would load every dialect linked into jaxlib
    (JAX's JaxIrContext does the same)."""
    cls = _SHARED.get("context_class")
    if cls is None:
        class BareContext(ir.Context):
            def __init__(self) -> None:
                super(ir.Context, self).__init__()  # noqa: UP008 - skips ir.Context.__init__ on purpose

        cls = _SHARED["context_class"] = BareContext
    return cls


class ContextState:
    """A reusable MLIR context and what is cached with it: MLIR types -> shapes, locations ->
    metadata, attributes -> values, the CHLO legalization pass manager. Types and locations are uniqued by the
    context, so the caches are valid exactly as long as it; they live and die with it."""

    def __init__(self) -> None:
        self.context = mlir_context()
        self.bytes_parsed = 0
        self.shapes: dict = {}  # ir.Type -> Shape
        self.metadata: dict = {}  # location attribute -> Raw | None
        self.attr_values: dict = {}  # attribute -> its value as the op rules read it (stablehlo_ops._ints)
        self._chlo_pm = None

    def chlo_pass_manager(self):
        """The `chlo-legalize-to-stablehlo` pipeline (built once; needs the context entered)."""
        if self._chlo_pm is None:
            from jaxlib.mlir import passmanager

            _register_passes()
            self._chlo_pm = passmanager.PassManager.parse("builtin.module(func.func(chlo-legalize-to-stablehlo))")
        return self._chlo_pm


def context_state(size: int = 0) -> ContextState:
    """This thread's reusable context state, renewed once it has parsed `_CONTEXT_BYTES`;
    `size` bytes are counted as about to be parsed."""
    state = getattr(_PER_THREAD, "state", None)
    if state is None or state.bytes_parsed > _CONTEXT_BYTES:
        state = _PER_THREAD.state = ContextState()
    state.bytes_parsed += size
    return state


def _register_passes() -> None:
    from jaxlib.mlir._mlir_libs import _stablehlo

    with _LOCK:
        if not _SHARED.get("passes"):
            _stablehlo.register_stablehlo_passes()
            _SHARED["passes"] = True


def parse_mlir(source: str | bytes, filename: str | None = None):
    """Parse StableHLO text or bytecode (portable artifacts included) into an ir.Module
    (in the context entered by the caller). A syntax error in text is a StableHloSyntaxError
    naming `filename`, the line and the column."""
    from jaxlib.mlir import ir

    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
        if not data.startswith(b"ML\xefR"):
            return _parse_text(data.decode("utf-8", errors="replace"), ir, filename)
        try:
            module = ir.Module.parse(data)
        except Exception as e:  # noqa: BLE001 - MLIR says why
            raise StableHloImportError(f"cannot read MLIR bytecode: {e}") from None
        if any(op.operation.name.startswith("vhlo.") for op in module.body.operations):
            # A portable artifact (versioned VHLO, as jax.export serializes): back to StableHLO.
            from jaxlib import _jax

            try:
                module = _jax.mlir.deserialize_portable_artifact(data)
            except Exception as e:  # noqa: BLE001
                raise StableHloImportError(f"cannot deserialize the StableHLO portable artifact: {e}") from None
        return module
    return _parse_text(source, ir, filename)


class StableHloSyntaxError(HloParseError, StableHloImportError):
    """StableHLO text MLIR's parser refused: the file, line and column of its first error,
    the source line with a caret, and MLIR's message."""


# MLIR's diagnostic for text parsed from a string: `error: "-":LINE:COL: message`.
_MLIR_DIAGNOSTIC = re.compile(r'error: "[^"]*":(\d+):(\d+): (.*)')


def _parse_text(text: str, ir, filename: str | None = None):
    try:
        return ir.Module.parse(text)
    except Exception as e:  # MLIR reports the position in its message
        found = _MLIR_DIAGNOSTIC.search(str(e))
        lines = text.splitlines()
        if found and 1 <= int(found.group(1)) <= len(lines):
            line, column = int(found.group(1)), int(found.group(2))
            raise StableHloSyntaxError(found.group(3).strip(), line, column, lines[line - 1],
                                       filename or "<string>") from None
        raise StableHloImportError(f"cannot parse StableHLO: {e}") from None


def legalize_chlo(module, state: ContextState | None = None) -> None:
    """Rewrite CHLO ops (erf_inv, lgamma, top_k, ...) into StableHLO, as XLA does."""
    try:
        if state is not None:
            pm = state.chlo_pass_manager()
        else:
            from jaxlib.mlir import passmanager

            _register_passes()
            pm = passmanager.PassManager.parse("builtin.module(func.func(chlo-legalize-to-stablehlo))")
        pm.run(module.operation)
    except Exception as e:  # noqa: BLE001
        raise StableHloImportError(f"CHLO legalization failed: {e}") from None
