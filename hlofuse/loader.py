"""Loading a module from a file, HLO text or StableHLO by suffix or explicit format."""
from __future__ import annotations

import os

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
    fmt = detect_format(path, format)
    if not os.path.exists(path):
        raise LoadError(f"{path}: no such file")
    if os.path.isdir(path):
        raise LoadError(f"{path}: is a directory, expected a module file")
    if fmt == "hlo":
        from .hlo.parser import parse_hlo

        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise LoadError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        return parse_hlo(text, filename=path)
    from .frontends.stablehlo import from_stablehlo

    with open(path, "rb") as f:
        data = f.read()
    source = data if data.startswith(_MLIR_BYTECODE_MAGIC) else data.decode("utf-8", errors="replace")
    return from_stablehlo(source, filename=path)


_MLIR_BYTECODE_MAGIC = b"ML\xefR"
