"""hlofuse: an XLA-style HLO fusion compiler in Python.

Public API (see DESIGN.md): parse_hlo, load, from_stablehlo, from_exported, compile,
compile_text, compile_file, jit.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .compiler import Executable, compile  # noqa: A004 - the design names it compile
from .hlo.errors import HloError, HloParseError, InputError, UnsupportedError, VerifierError


def parse_hlo(text: str, filename: str = "<string>"):
    """Parse XLA HLO text into an HloModule (HloParseError on bad text)."""
    from .hlo.parser import parse_hlo as _parse

    return _parse(text, filename)


def from_stablehlo(text_or_bytecode, **options):
    """Import a StableHLO module (text, MLIR bytecode or a serialized jax.export) as an HloModule.

    Options: entry="main", filename=None (for error locations), inline_calls, module_name.
    """
    from .frontends.stablehlo import from_stablehlo as _import

    return _import(text_or_bytecode, **options)


def from_exported(exported, *args, platform: str = "cpu"):
    """Import a `jax.export.Exported`; shape-polymorphic exports need the concrete `args`
    (arrays or shape/dtype specs) to refine their symbolic dimensions."""
    from .frontends.jax_api import from_exported as _from_exported

    return _from_exported(exported, *args, platform=platform)


def compile_exported(exported, target: str = "cpu", fusion: bool = True):
    """A callable running `exported` with hlofuse, compiled once per concrete input signature."""
    from .frontends.jax_api import compile_exported as _compile_exported

    return _compile_exported(exported, target=target, fusion=fusion)


def jit(fn=None, *, target: str = "cpu", fusion: bool = True):
    """Trace `fn` with JAX, export it, compile it with hlofuse; cached per input signature."""
    from .frontends.jax_api import jit as _jit

    return _jit(fn, target=target, fusion=fusion)


def compile_text(text: str, target: str = "cpu", **options):
    """`compile(parse_hlo(text), target, **options)`; on the CPU a text compiled before is found
    by its digest and loaded without parsing it (compiler.compile_source)."""
    from .compiler import compile_source

    return compile_source(text, "hlo", lambda: parse_hlo(text), target, **options)


def compile_file(path: str, target: str = "cpu", format: str | None = None, **options):
    """`compile(load(path, format), target, **options)`; on the CPU a file compiled before is
    found by its contents' digest and loaded without parsing it (compiler.compile_source)."""
    from .compiler import compile_source
    from .loader import read_source

    source = read_source(path, format)
    return compile_source(source.data, source.format, source.make_module, target, **options)


def load(path: str, format: str | None = None):
    """Load a module from a file: `.hlo`/`.txt` as HLO text, `.mlir`/`.mlirbc` as StableHLO."""
    from .loader import load_module

    return load_module(path, format)


__all__ = [
    "Executable", "HloError", "HloParseError", "InputError", "UnsupportedError", "VerifierError",
    "compile", "compile_exported", "compile_file", "compile_text", "from_exported", "from_stablehlo", "jit", "load",
    "parse_hlo", "__version__",
]
