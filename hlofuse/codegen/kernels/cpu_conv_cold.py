"""The direct convolution kernel's cold non-finite-weight path (cpu_conv.py's `_ConvEmitter`),
and which taps need it (issue 15: emitted so that LLVM has less to do).

Padding and lhs-dilation holes contribute 0 * weight (cpu_conv's module docstring): nothing,
unless the weight is inf or NaN. So each call first scans the weights (`weights_nonfinite`),
and only where one is not finite does each output position add 0 * w for its taps off the
input (`fill_taps`), after its accumulation and before its epilogue. That path never runs on
finite weights, yet LLVM optimises it with the kernel; two rules make it less work:

- A kernel none of whose taps can fall off the input (`never_on_padding`: every window
  dimension `always_inside` at every output position, as in 1x1 and VALID convolutions) has
  no cold path and no weight scan: they add nothing there. `positions_along` gives the same
  test to every `window_tap` of the kernel, so a dimension whose taps all lie on the input gets
  no in-bounds test or branch in the hot loops either.
- Rolled, the cold path's window loops are one loop over every tap (`_fill_flat`) for all the
  blocked positions at once: each offset the quotient and remainder of the tap number by
  constants, each position's test and terms in its body, so each accumulator gets the same
  terms in the same order. Nested, each window dimension was one more loop for LLVM to
  canonicalise (and it unswitched the inner one on the outer dimensions' in-bounds flag,
  copying the feature loop), and a dense kernel's POSITION_BLOCK positions had a nest each.

Each output element gets the same terms in the same order either way: the same bits
(tests/codegen/test_conv_cold_taps.py). Measured in docs/compile_time.md ("Direct convolution
kernels: less for LLVM on their cold path").
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...emitters.ir_helpers import const_i64, for_range
from .cpu_conv_features import fill_features
from .cpu_conv_geometry import ConvGeometry, always_inside, window_tap
from .cpu_conv_vector import fill_vector, load_vector, splat, vector_loop
from .loop_hints import forbid_vectorization

# Whether taps known to lie on the input go without tests and kernels with no tap off the input
# without the cold path (`positions_along`, `never_on_padding`; a switch for A/B measurements:
# benchmarks/mobilenet_layers.py --switch-ab).
KNOWN_INSIDE = True
# Whether the cold path's rolled window loops are one loop over every tap (`_fill_flat`; a switch
# for A/B measurements).
FLAT_COLD_TAPS = True

# Whether the weight scan's vector loop may be unrolled (`weights_nonfinite`; a switch for A/B
# measurements).
WSCAN_UNROLL = False

TRUE = ir.Constant(ir.IntType(1), 1)


def _i(v: int) -> ir.Constant:
    return const_i64(v)


def and_flags(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x and y for i1 values, a constant true operand left out."""
    if isinstance(x, ir.Constant) and x.constant:
        return y
    if isinstance(y, ir.Constant) and y.constant:
        return x
    return b.and_(x, y)


def positions_along(geo: ConvGeometry, level: int) -> int | None:
    """Output positions along spatial dimension `level`, for `window_tap` to make the in-bounds
    flag of a dimension whose taps all lie on the input the constant true (None: no such test,
    KNOWN_INSIDE off)."""
    return geo.out_spatial[level] if KNOWN_INSIDE else None


def never_on_padding(geo: ConvGeometry) -> bool:
    """Whether no tap of any output position falls on padding or an lhs-dilation hole
    (`always_inside` along every window dimension): the cold path would add nothing."""
    return KNOWN_INSIDE and all(always_inside(d, n, limit)
                                for d, n, limit in zip(geo.window, geo.out_spatial, geo.dilated_input))


def weights_nonfinite(em) -> ir.Value:
    """i1: whether any weight of `_ConvEmitter` em's kernel is inf or NaN (0 * w is NaN exactly
    then), from one pass over the weights (small beside the convolution's work)."""
    b = em.b
    with b.goto_entry_block():
        flag = b.alloca(ir.IntType(1), name="nonfinite")
    b.store(ir.Constant(ir.IntType(1), 0), flag)
    lanes = em.lanes or (em.fvec.lanes if em.fvec is not None else None)
    if lanes:  # weights of the accumulation type: a vector of them at a time
        zeros = splat(em.zero, lanes)

        def vector(i) -> None:
            z = b.fmul(load_vector(b, em.w, i, lanes), zeros)
            some = b.icmp_unsigned("!=", b.bitcast(b.fcmp_unordered("uno", z, z), ir.IntType(lanes)),
                                   ir.Constant(ir.IntType(lanes), 0))
            b.store(b.or_(b.load(flag), some), flag)

        def scalar(i) -> None:
            z = b.fmul(em.load(em.w, i, em.geo.rhs_type), em.zero)
            b.store(b.or_(b.load(flag), b.fcmp_unordered("uno", z, z)), flag)

        # Rolled: it runs once a call, and LLVM otherwise unrolled it fully (36 vectors of 8 for
        # a 3x3 depthwise kernel of 32 channels: 150 of its 329 instructions after O3).
        vector_loop(b, em.rhs_count, lanes, "wscan", vector, scalar, unroll=WSCAN_UNROLL)
        return b.load(flag)
    with for_range(b, _i(0), _i(em.rhs_count), "wscan") as i:
        z = b.fmul(em.load(em.w, i, em.geo.rhs_type), em.zero)
        b.store(b.or_(b.load(flag), b.fcmp_unordered("uno", z, z)), flag)
    return b.load(flag)


def fill_taps(em, ps: list, count: int) -> None:
    """acc += 0 * w for each tap of positions ps (+ 0..count-1 along the last spatial
    dimension) that falls on padding or an lhs-dilation hole, every output feature and
    input feature of its group. Run only when some weight is inf or NaN: the sum is then
    NaN or unchanged, whatever the order, so the main loop nest need not interleave them."""
    if FLAT_COLD_TAPS and not em.unroll_cold:
        _fill_flat(em, ps, count)
        return
    for c in range(count):
        _fill_level(em, ps, c, 0, TRUE, 0)


def _fill_flat(em, ps: list, count: int) -> None:
    """`_fill_level`'s taps for the `count` blocked positions as one rolled loop over every
    window offset (row-major; each dimension's offset the quotient and remainder of the tap
    number by constants), each position's in-bounds test and terms in its body: each
    accumulator gets the same terms in the same order (module docstring)."""
    geo, b = em.geo, em.b
    taps = math.prod(d.size for d in geo.window)
    last = len(geo.window) - 1
    with for_range(b, _i(0), _i(taps), "ftap", unroll=False) as t:
        inside, woff, inner, ks = TRUE, 0, taps, []
        for level, d in enumerate(geo.window):
            inner //= d.size
            k = b.udiv(t, _i(inner)) if inner > 1 else t
            if level:
                k = b.urem(k, _i(d.size))
            kk = b.sub(_i(d.size - 1), k) if d.window_reversal else k
            ks.append(k)
            woff = em.add(woff, em.mul(kk, geo.w_spatial[level]))
            if level < last:
                _, ok = window_tap(b, ps[level], k, d, geo.dilated_input[level], positions_along(geo, level))
                inside = and_flags(b, inside, ok)
        for c in range(count):  # blocked positions differ along the last dimension only
            d = geo.window[last]
            _, ok = window_tap(b, em.add(ps[last], c), ks[last], d, geo.dilated_input[last], positions_along(geo, last))
            _fill_level(em, ps, c, len(geo.window), and_flags(b, inside, ok), woff)
    forbid_vectorization(t)


def _fill_level(em, ps: list, c: int, level: int, inside, woff) -> None:
    """The window offsets from spatial dimension `level` on (`inside`: whether the offsets so
    far are all on input elements; `woff`: their weight offset), as nested loops."""
    geo, b = em.geo, em.b
    if level == len(geo.window):
        with b.if_then(b.not_(inside)):
            if em.lanes:
                fill_vector(em, woff, em.accs[c])
                return
            if em.fvec is not None:
                fill_features(em, woff, em.accs[c], em.fvec.lanes)
                return
            with for_range(b, _i(0), _i(geo.features), "fo", unroll=em.unroll_cold) as o:
                with for_range(b, _i(0), _i(geo.group_inputs), "fj", unroll=em.unroll_cold) as j:
                    wv = em.load(em.w, em.add(woff, em.mul(j, geo.w_in), em.mul(o, geo.w_out)), geo.rhs_type)
                    em.madd(o, em.zero, wv, em.accs[c])
        return
    d = geo.window[level]
    with for_range(b, _i(0), _i(d.size), f"f{level}", unroll=em.unroll_cold) as k:
        kk = b.sub(_i(d.size - 1), k) if d.window_reversal else k
        p = em.add(ps[level], c) if level == len(geo.window) - 1 else ps[level]
        _, ok = window_tap(b, p, k, d, geo.dilated_input[level], positions_along(geo, level))
        _fill_level(em, ps, c, level + 1, and_flags(b, inside, ok), em.add(woff, em.mul(kk, geo.w_spatial[level])))
