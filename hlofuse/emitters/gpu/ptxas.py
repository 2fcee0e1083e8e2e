"""Assembling PTX without a GPU: `ptxas` when installed, nvJitLink from the CUDA wheels otherwise.

Used by tests and by `GpuProgram.validate()` to prove that generated PTX is accepted for a
real architecture (sm_80/sm_90) on machines that have no GPU."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

PTXAS_CANDIDATES = ("/usr/local/bin/ptxas", "/usr/local/cuda/bin/ptxas")


def find_ptxas() -> str | None:
    """Path of a ptxas executable, or None."""
    found = shutil.which("ptxas")
    if found:
        return found
    return next((p for p in PTXAS_CANDIDATES if os.access(p, os.X_OK)), None)


def nvjitlink_available() -> bool:
    """Whether cuda.core's Linker (nvJitLink) can be used."""
    try:
        from cuda.core import Linker  # noqa: F401

        return True
    except Exception:  # noqa: BLE001
        return False


def assembler() -> str | None:
    """"ptxas", "nvjitlink", or None when PTX cannot be assembled on this machine."""
    if find_ptxas():
        return "ptxas"
    if nvjitlink_available():
        return "nvjitlink"
    return None


class PtxAssemblyError(RuntimeError):
    """PTX rejected by the assembler (the message carries its diagnostics)."""


def assemble(ptx: str, arch: str = "sm_90", opt_level: int | None = None) -> bytes:
    """Assemble `ptx` for `arch` and return the cubin; PtxAssemblyError when it is rejected.
    `opt_level` (0-3) is ptxas's -O level; None leaves the assembler's default (-O3)."""
    if opt_level is not None and opt_level not in (0, 1, 2, 3):
        raise ValueError(f"ptxas optimization level {opt_level!r}: expected 0, 1, 2 or 3")
    level = [] if opt_level is None else [f"-O{opt_level}"]
    ptxas = find_ptxas()
    if ptxas:
        with tempfile.TemporaryDirectory(prefix="hlofuse-ptx-") as d:
            src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
            with open(src, "w") as f:
                f.write(ptx)
            r = subprocess.run([ptxas, f"-arch={arch}", *level, src, "-o", out], capture_output=True, text=True)
            if r.returncode != 0:
                raise PtxAssemblyError(f"ptxas -arch={arch} rejected the PTX:\n{r.stderr.strip()}")
            with open(out, "rb") as f:
                return f.read()
    if nvjitlink_available():
        from cuda.core import Linker, LinkerOptions, ObjectCode

        try:
            options = LinkerOptions(arch=arch, ptxas_options=level or None)
            return bytes(Linker(ObjectCode.from_ptx(ptx.encode()), options=options).link("cubin").code)
        except Exception as e:  # noqa: BLE001
            raise PtxAssemblyError(f"nvJitLink ({arch}) rejected the PTX: {e}") from None
    raise PtxAssemblyError("neither ptxas nor nvJitLink is available to assemble PTX")
