"""`rng-bit-generator` for the CPU executor, with XLA's RngBitGeneratorExpander semantics:
state[0] is the key; ThreeFry-2x32 (20 rounds) counts from state[1], Philox-4x32 (10 rounds)
from a 128-bit counter (state[1:3], or state reversed for a 2-element state); `rng_default`
is Philox, as on XLA's CPU and GPU backends. Written with numpy's wrapping uint32/uint64
arithmetic; the reference interpreter (written separately) is the oracle in tests."""
from __future__ import annotations

import math

import numpy as np

from ..hlo.errors import UnsupportedError
from ..hlo.opcodes import register_library

U32, U64 = np.uint32, np.uint64
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def _halves(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = x.astype(U64)
    return (x & U64(0xFFFFFFFF)).astype(U32), (x >> U64(32)).astype(U32)


def _join(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(U64) | (hi.astype(U64) << U64(32))


def threefry2x32(x0: np.ndarray, x1: np.ndarray, k0, k1) -> tuple[np.ndarray, np.ndarray]:
    """ThreeFry-2x32 with 20 rounds (Salmon et al. 2011) on counter words (x0, x1)."""
    ks = (int(k0), int(k1), 0x1BD11BDA ^ int(k0) ^ int(k1))  # Python ints: no numpy scalar overflow
    x0, x1 = x0 + U32(ks[0]), x1 + U32(ks[1])
    for group in range(5):
        for d in _ROTATIONS[:4] if group % 2 == 0 else _ROTATIONS[4:]:
            x0 = x0 + x1
            x1 = (x1 << U32(d)) | (x1 >> U32(32 - d))
            x1 = x0 ^ x1
        x0 = x0 + U32(ks[(group + 1) % 3])
        x1 = x1 + U32((ks[(group + 2) % 3] + group + 1) & 0xFFFFFFFF)
    return x0, x1


def philox4x32(x: list[np.ndarray], k0, k1) -> list[np.ndarray]:
    """Philox-4x32 with 10 rounds on counter words x[0..3]."""
    k0, k1 = int(k0), int(k1)
    for _ in range(10):
        p0 = x[0].astype(U64) * U64(0xD2511F53)
        p1 = x[2].astype(U64) * U64(0xCD9E8D57)
        lo0, hi0 = _halves(p0)
        lo1, hi1 = _halves(p1)
        x = [hi1 ^ x[1] ^ U32(k0), lo1, hi0 ^ x[3] ^ U32(k1), lo0]
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return x


def _split_dim(dims: tuple[int, ...]) -> int:
    """XLA's SplitShapeIntoHalves: the first even dimension, else the largest."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def _threefry_bits32(key: int, counter: int, dims: tuple[int, ...]) -> tuple[np.ndarray, int]:
    if not dims:
        x0, _ = threefry2x32(*_halves(np.array([counter], U64)), *_halves(np.array(key, U64)))
        return x0.reshape(()), counter + 1
    sd = _split_dim(dims)
    half = list(dims)
    half[sd] = -(-dims[sd] // 2)
    n = math.prod(half)
    counters = U64(counter) + np.arange(n, dtype=U64)
    x0, x1 = threefry2x32(*_halves(counters), *_halves(np.array(key, U64)))
    pair = np.stack([x0.reshape(half), x1.reshape(half)], axis=sd + 1)
    full = list(dims)
    full[sd] = 2 * half[sd]
    bits = pair.reshape(full)
    return bits[tuple(slice(0, d) for d in dims)], counter + n


def _threefry_bits64(key: int, counter: int, dims: tuple[int, ...]) -> tuple[np.ndarray, int]:
    n = math.prod(dims)
    counters = U64(counter) + np.arange(n, dtype=U64)
    x0, x1 = threefry2x32(*_halves(counters), *_halves(np.array(key, U64)))
    return _join(x0, x1).reshape(dims), counter + n


def _philox_words(key: int, low: int, high: int, count: int) -> tuple[list[np.ndarray], int, int]:
    """`count` blocks of 4 words from the 128-bit counter (low, high), and the advanced counter."""
    idx = np.arange(count, dtype=U64)
    new_low = U64(low) + idx
    carry = (new_low < U64(low)).astype(U64)
    new_high = U64(high) + carry
    words = [*_halves(new_low), *_halves(new_high)]
    k0, k1 = _halves(np.array(key, U64))
    out = philox4x32(words, k0, k1)
    end_low = (low + count) & 0xFFFFFFFFFFFFFFFF
    end_high = (high + (1 if end_low < low else 0)) & 0xFFFFFFFFFFFFFFFF
    return out, end_low, end_high


def _philox_bits(key: int, low: int, high: int, dims: tuple[int, ...], wide: bool):
    n = math.prod(dims)
    if wide:
        words, nl, nh = _philox_words(key, low, high, -(-n // 2))
        numbers = np.stack([_join(words[0], words[1]), _join(words[2], words[3])], axis=1).reshape(-1)
    else:
        words, nl, nh = _philox_words(key, low, high, -(-n // 4))
        numbers = np.stack(words, axis=1).reshape(-1)
    return numbers[:n].reshape(dims), nl, nh


def _as_element_type(bits: np.ndarray, et) -> np.ndarray:
    """Generated words as elements of type `et`: the low `et.bits` bits of each word, as XLA
    keeps them (bit-cast for 8/16/32/64-bit types; the value of the low bits for sub-byte
    integer types, which numpy stores one per byte)."""
    if et.bits < 8:
        low = (bits & U64((1 << et.bits) - 1)).astype(np.int64)
        if et.kind == "sint":
            low -= (low >> (et.bits - 1)) << et.bits  # two's complement of the low bits
        return np.asarray(low, dtype=np.int64).astype(et.numpy)  # 0-d stays an array
    words = bits.astype(np.dtype(f"u{et.bits // 8}"))
    return np.ascontiguousarray(words).view(et.numpy).reshape(bits.shape)


@register_library("rng-bit-generator")
def rng_bit_generator(inst, args, ctx):
    """(new state, random bits) for rng_three_fry, rng_philox and rng_default (Philox).

    The new state is the old one with its counter words advanced: it keeps the state's shape
    whatever its length (the key and any unused words pass through unchanged)."""
    (state,) = args
    state_shape, out_shape = inst.shape.elements
    state = np.asarray(state).astype(U64).reshape(-1)
    dims, et = tuple(out_shape.dims), out_shape.dtype
    algorithm = str(inst.attrs.get("algorithm", "rng_default")).lower()
    if et.bits not in (1, 2, 4, 8, 16, 32, 64) or et.is_complex or et.is_pred or (et.bits < 8 and not et.is_integer):
        raise UnsupportedError(f"rng-bit-generator {inst.name}: {et.name} results are not supported")
    if state_shape.dtype.bits != 64 or state.size < 2:
        raise UnsupportedError(f"rng-bit-generator {inst.name}: the state must be a vector of at least 2 "
                               f"64-bit words, not {state_shape.to_text(False)}")
    key = int(state[0])
    new_state = state.copy()
    if algorithm in ("rng_three_fry", "three_fry"):
        counter = int(state[1])
        if et.bits == 64:
            bits, counter = _threefry_bits64(key, counter, dims)
        else:
            bits, counter = _threefry_bits32(key, counter, dims)
        new_state[1] = counter & 0xFFFFFFFFFFFFFFFF
    elif algorithm in ("rng_philox", "philox", "rng_default", "default"):
        if state.size >= 3:
            low, high = int(state[1]), int(state[2])
        else:
            low, high = int(state[1]), int(state[0])  # the state reversed, as XLA reads it
        bits, nl, nh = _philox_bits(key, low, high, dims, et.bits == 64)
        new_state[1] = nl
        if state.size >= 3:
            new_state[2] = nh
    else:
        raise UnsupportedError(f"rng-bit-generator {inst.name}: unknown algorithm {algorithm}")
    out_state = new_state.view(state_shape.dtype.numpy).reshape(state_shape.dims)
    return out_state, _as_element_type(bits, et)
