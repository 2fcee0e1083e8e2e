"""Reference semantics of the random-number ops.

`rng-bit-generator` follows XLA's RngBitGeneratorExpander bit for bit: the state's first
u64 is the key, ThreeFry-2x32 (20 rounds) or Philox-4x32 (10 rounds) runs on counters taken
from the rest of the state, and the new state is returned with the bits. `rng_default` is
Philox, the algorithm XLA's CPU and GPU backends pick for it.

`rng` and `rng-get-and-update-state` draw from a stream XLA leaves unspecified (each backend
has its own), so there is nothing to reproduce: they are unsupported.
"""
from __future__ import annotations

import math

import numpy as np

from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloInstruction
from ...hlo.opcodes import mark_unsupported, register_reference
from .op_helpers import attr_str

_U32 = np.uint32
_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)


def _split64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) 32-bit halves of u64 values."""
    x = x.astype(_U64)
    return (x & _MASK32).astype(_U32), (x >> _U64(32)).astype(_U32)


def _join32(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return low.astype(_U64) | (high.astype(_U64) << _U64(32))


def _rotl(v: np.ndarray, distance: int) -> np.ndarray:
    return (v << _U32(distance)) | (v >> _U32(32 - distance))


def threefry2x32(x0: np.ndarray, x1: np.ndarray, k0, k1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 with 20 rounds (Salmon et al., SC 2011), as XLA builds it."""
    rotations = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (_U32(k0), _U32(k1), _U32(0x1BD11BDA) ^ _U32(k0) ^ _U32(k1))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for block in range(5):
        for r in rotations[4 * (block % 2): 4 * (block % 2) + 4]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + _U32(block + 1)
    return x0, x1


def philox4x32(x: list[np.ndarray], k0, k1) -> list[np.ndarray]:
    """Philox-4x32 with 10 rounds, the key raised by the Weyl constants after each round."""
    k0, k1 = _U32(k0), _U32(k1)
    for _ in range(10):
        p0 = x[0].astype(_U64) * _U64(0xD2511F53)
        p1 = x[2].astype(_U64) * _U64(0xCD9E8D57)
        x = [(p1 >> _U64(32)).astype(_U32) ^ x[1] ^ k0, (p1 & _MASK32).astype(_U32),
             (p0 >> _U64(32)).astype(_U32) ^ x[3] ^ k1, (p0 & _MASK32).astype(_U32)]
        k0, k1 = k0 + _U32(0x9E3779B9), k1 + _U32(0xBB67AE85)
    return x


def _split_shape(dims: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """XLA's SplitShapeIntoHalves: the half shape (split dimension halved, rounded up, with a
    size-1 dimension after it) and the split dimension."""
    if not dims:
        return (1,), 0
    even = [i for i, d in enumerate(dims) if d % 2 == 0]
    split = even[0] if even else max(range(len(dims)), key=lambda i: (dims[i], -i))
    half = list(dims[:split]) + [(dims[split] + 1) // 2, 1] + list(dims[split + 1:])
    return tuple(half), split


def _threefry_bits(key, counter, dims: tuple[int, ...], bits: int) -> tuple[np.ndarray, int]:
    """ThreeFry bits of the given shape and width, and how far the counter advanced."""
    k0, k1 = _split64(np.array(key, dtype=_U64))
    if bits == 64:
        n = math.prod(dims)
        x0, x1 = _split64(_U64(counter) + np.arange(n, dtype=_U64))
        y0, y1 = threefry2x32(x0, x1, k0, k1)
        return _join32(y0, y1).reshape(dims), n
    half, split = _split_shape(dims)
    n = math.prod(half)
    x0, x1 = _split64(_U64(counter) + np.arange(n, dtype=_U64))
    y0, y1 = threefry2x32(x0, x1, k0, k1)
    if not dims:
        return y0.reshape(()), n
    # The two outputs interleave along the split dimension: element 2j + c comes from y_c[j].
    both = np.concatenate([y0.reshape(half), y1.reshape(half)], axis=split + 1)
    full = list(dims)
    full[split] = 2 * half[split]
    out = both.reshape(full)
    return out[tuple(slice(0, d) for d in dims)], n


def _philox_words(key, counter_low, counter_high, n: int) -> tuple[list[np.ndarray], tuple[int, int]]:
    """4*n Philox words from 128-bit counters counter..counter+n-1, and the counter after."""
    k0, k1 = _split64(np.array(key, dtype=_U64))
    low = _U64(counter_low) + np.arange(n, dtype=_U64)
    carry = (low < _U64(counter_low)).astype(_U64)
    high = _U64(counter_high) + carry
    c = list(_split64(low)) + list(_split64(high))
    new_low = (int(counter_low) + n) % 2**64
    new_high = (int(counter_high) + (1 if new_low < int(counter_low) else 0)) % 2**64
    return philox4x32(c, k0, k1), (new_low, new_high)


def _philox_bits(key, counter_low, counter_high, dims: tuple[int, ...], bits: int):
    n = math.prod(dims)
    if bits == 64:
        words, new = _philox_words(key, counter_low, counter_high, (2 * n + 3) // 4)
        pairs = np.stack([_join32(words[0], words[1]), _join32(words[2], words[3])], axis=1)
    else:
        words, new = _philox_words(key, counter_low, counter_high, (n + 3) // 4)
        pairs = np.stack(words, axis=1)  # round-robin: element 4i + c is words[c][i]
    return pairs.reshape(-1)[:n].reshape(dims), new


@register_reference("rng-bit-generator")
def rng_bit_generator_reference(inst: HloInstruction, args: list, interp) -> tuple:
    """`rng-bit-generator(state), algorithm=...` -> (new state, random bits)."""
    state = np.asarray(args[0])
    if state.dtype.itemsize != 8:
        raise UnsupportedError(f"rng-bit-generator {inst.name}: the state must be a u64 vector")
    state = state.view(_U64).reshape(-1)
    algorithm = attr_str(inst, "algorithm", "rng_default").lower()
    state_shape, data_shape = inst.shape.elements
    out_dtype = data_shape.dtype.numpy
    bits = np.dtype(out_dtype).itemsize * 8
    if bits not in (8, 16, 32, 64) or data_shape.dtype.kind not in ("uint", "sint", "float"):
        raise UnsupportedError(f"rng-bit-generator {inst.name}: element type {data_shape.dtype.name} "
                               "is not supported")
    dims = tuple(data_shape.dims)
    gen_bits = 64 if bits == 64 else 32  # narrower types keep the low bits of 32-bit words
    if algorithm == "rng_three_fry":
        if state.size < 2:
            raise UnsupportedError(f"rng-bit-generator {inst.name}: three_fry needs a u64[2] state")
        raw, used = _threefry_bits(state[0], state[1], dims, gen_bits)
        new_state = state.copy()
        new_state[1] = state[1] + _U64(used)
    elif algorithm in ("rng_philox", "rng_default"):
        if state.size < 2:
            raise UnsupportedError(f"rng-bit-generator {inst.name}: philox needs a u64[2] or u64[3] state")
        # A 3-word state holds a 128-bit counter; with 2 words XLA reads (state[1], key) as one.
        low, high = (state[1], state[2]) if state.size >= 3 else (state[1], state[0])
        raw, (new_low, new_high) = _philox_bits(state[0], low, high, dims, gen_bits)
        new_state = state.copy()
        new_state[1] = _U64(new_low)
        if state.size >= 3:
            new_state[2] = _U64(new_high)
    else:
        raise UnsupportedError(f"rng-bit-generator {inst.name}: unknown algorithm {algorithm}")
    if data_shape.dtype.bits < 8:
        # Sub-byte integers (one per byte in numpy): the value of the word's low bits, as
        # XLA converts them; a bit-cast of the low byte would leave the high bits set.
        nbits = data_shape.dtype.bits
        low = (raw.astype(_U64) & _U64((1 << nbits) - 1)).astype(np.int64)
        if data_shape.dtype.kind == "sint":
            low -= (low >> (nbits - 1)) << nbits
        value = np.asarray(low, dtype=np.int64).astype(out_dtype)  # 0-d stays an array
    else:
        value = raw.astype(np.dtype(f"u{bits // 8}")).view(out_dtype)
    return new_state.reshape(state_shape.dims).view(state_shape.dtype.numpy), value


_UNSPECIFIED = ("XLA leaves the random stream of rng and rng-get-and-update-state unspecified "
                "(each backend draws differently), so a reference cannot reproduce it; "
                "use rng-bit-generator, whose algorithm is specified")
# No rule is registered: the interpreter raises UnsupportedError naming the instruction and
# giving this reason.
mark_unsupported("reference", _UNSPECIFIED, "rng", "rng-get-and-update-state")
