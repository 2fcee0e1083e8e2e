"""Reference semantics of `fft`: FFT, IFFT, RFFT and IRFFT over the trailing
`len(fft_length)` dimensions, computed in double precision by numpy.fft and rounded to the
result type (c64 for f32/c64 inputs, c128 for f64/c128; IRFFT gives the real type)."""
from __future__ import annotations

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import register_reference
from .op_helpers import attr_dims, attr_str, result_dtype


@register_reference("fft")
def fft_reference(inst: HloInstruction, args: list, interp) -> np.ndarray:
    """`fft(operand), fft_type=FFT|IFFT|RFFT|IRFFT, fft_length={...}`."""
    x = np.asarray(args[0])
    kind = attr_str(inst, "fft_type").upper()
    lengths = list(attr_dims(inst, "fft_length"))
    if not 1 <= len(lengths) <= 3 or len(lengths) > x.ndim:
        raise UnsupportedError(f"fft {inst.name}: fft_length must name 1 to 3 trailing dimensions")
    axes = list(range(x.ndim - len(lengths), x.ndim))
    out_dtype = result_dtype(inst.shape)
    if kind == "FFT":
        y = np.fft.fftn(x.astype(np.complex128), s=lengths, axes=axes)
    elif kind == "IFFT":
        y = np.fft.ifftn(x.astype(np.complex128), s=lengths, axes=axes)
    elif kind == "RFFT":
        y = np.fft.rfftn(x.astype(np.float64), s=lengths, axes=axes)
    elif kind == "IRFFT":
        y = np.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes)
    else:
        raise UnsupportedError(f"fft {inst.name}: unknown fft_type {kind}")
    return y.astype(out_dtype)
