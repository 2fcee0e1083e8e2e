"""Loading a module from a file, HLO text or StableHLO by suffix or explicit format."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from .hlo.errors import HloError
from .hlo.ir import HloModule

_HLO_SUFFIXES = (".hlo", ".txt", ".hlotxt")
_STABLEHLO_SUFFIXES = (".mlir", ".mlirbc", ".stablehlo")


class LoadError(HloError):
    """A module file that cannot be read or whose format cannot be told."""


def detect_format(path: str, format: str | None = None) -> str:
    """'hlo' or 'stablehlo' for `path`, from `format` if given, else from the suffix."""
    if format is not None:
        if format not in ("hlo", "stablehlo"):
            raise LoadError(f"unknown module format '{format}'; expected hlo or stablehlo")
        return format
    lower = path.lower()
    if lower.endswith(_STABLEHLO_SUFFIXES):
        return "stablehlo"
    if lower.endswith(_HLO_SUFFIXES):
        return "hlo"
    raise LoadError(f"{path}: cannot tell the module format from the suffix; "
                    f"use .hlo for HLO text or .mlir for StableHLO, or pass --format hlo|stablehlo")


def load_module(path: str, format: str | None = None) -> HloModule:
    """Read and parse a module file."""
    return read_source(path, format).make_module()


@dataclass
class ModuleSource:
    """A module file read but not parsed: its bytes, its format ("hlo" or "stablehlo": what
    compiler.compile_source keys a compile by, with the bytes' digest) and the parse."""

    data: bytes
    format: str
    make_module: Callable[[], HloModule]


def read_source(path: str, format: str | None = None) -> ModuleSource:
    """Read a module file (errors of the file itself raised now, LoadError); parsing waits for
    `make_module()` (compiler.compile_source needs none on a cache hit)."""
    fmt = detect_format(path, format)
    if not os.path.exists(path):
        raise LoadError(f"{path}: no such file")
    if os.path.isdir(path):
        raise LoadError(f"{path}: is a directory, expected a module file")
    with open(path, "rb") as f:
        data = f.read()
    if fmt == "hlo":
        try:  # and newlines translated as a file opened as text would have them
            text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError as e:
            raise LoadError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None

        def parse_text() -> HloModule:
            from .hlo.parser import parse_hlo

            return parse_hlo(text, filename=path)

        return ModuleSource(data, fmt, parse_text)

    def import_stablehlo() -> HloModule:
        from .frontends.stablehlo import from_stablehlo

        source = data if data.startswith(_MLIR_BYTECODE_MAGIC) else data.decode("utf-8", errors="replace")
        return from_stablehlo(source, filename=path)

    return ModuleSource(data, fmt, import_stablehlo)


_MLIR_BYTECODE_MAGIC = b"ML\xefR"
