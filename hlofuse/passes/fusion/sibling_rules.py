"""What two kernels must share to become one multi-output kernel (XLA's gpu_fusible.cc and
multi_output_fusion.cc): the hero and loop shape of a fusion, whether their loops fit, and
whether a common operand is worth sharing.

Used by sibling and producer-consumer multi-output fusion and by horizontal input fusion.
"""
from __future__ import annotations

from typing import Callable

from ...hlo.ir import HloInstruction
from .decisions import Decision
from .fusibility import fusion_outputs, is_physically_transposing, reduce_hero, reduction_is_contiguous

refuse = Decision.refuse
_OK = Decision.allow()
_PASS_THROUGH = ("bitcast", "reshape", "convert")


def _transpose_hero(out: HloInstruction) -> HloInstruction | None:
    """XLA's FindNonTrivialHero for a tiled transpose: from an output back through elementwise
    ops whose other operands are parameters (each op with one unique computed operand), to a
    physically transposing transpose or copy. `add(exp, exp)` passes; `add(exp1, exp2)` with two
    computed operands stops the walk (XLA sees no transpose hero then)."""
    cur = out
    for _ in range(64):  # a chain, not a search: the bound only guards pathological depth
        if cur.opcode in ("transpose", "copy") and is_physically_transposing(cur):
            return cur
        if cur.opcode == "parameter" or not (cur.info.elementwise or cur.opcode in _PASS_THROUGH):
            return None
        computed = list(dict.fromkeys(o for o in cur.operands if o.opcode not in ("parameter", "constant")))
        if len(computed) != 1:
            return None
        cur = computed[0]
    return None


def hero(inst: HloInstruction) -> HloInstruction:
    """XLA's GetRealHeroForMultiOutputFusion: a reduce among the outputs, else a tiled transpose
    one of them computes, else the first output."""
    r = reduce_hero(inst)
    if r is not None:
        return r
    outs = fusion_outputs(inst)
    for o in outs:
        t = _transpose_hero(o)
        if t is not None:
            return t
    return outs[0]


def is_transpose_hero(h: HloInstruction) -> bool:
    """A tiled transpose (a physically transposing transpose or copy)."""
    return h.opcode in ("transpose", "copy") and is_physically_transposing(h)


def loop_shape(h: HloInstruction):
    """The shape a kernel with hero `h` loops over: a contiguous reduction's or a tiled
    transpose's operand (XLA gives a transpose fusion its operand's loop shape), else `h`'s."""
    if (h.opcode == "reduce" and reduction_is_contiguous(h)) or is_transpose_hero(h):
        return h.operands[0].shape
    return h.shape


def same_loop(a, b) -> bool:
    """XLA: equal shapes, or shapes one reshape-bitcast apart (same element count, both in
    row-major layout, so one linear index walks both)."""
    if a.is_tuple or b.is_tuple:
        return a.equal_ignoring_layout(b)
    if a.dims == b.dims:
        return True
    if [d for d in a.dims if d != 1] == [d for d in b.dims if d != 1]:
        return True
    return a.element_count() == b.element_count() and a.is_row_major() and b.is_row_major()


def _physical_dims(shape) -> tuple[int, ...]:
    order = shape.layout.minor_to_major if shape.layout is not None else tuple(range(shape.rank - 1, -1, -1))
    return tuple(shape.dims[d] for d in reversed(order))


def _transpose_key(h: HloInstruction) -> tuple:
    """A tiled transpose as XLA describes it: the physical dimensions read and written."""
    return _physical_dims(h.operands[0].shape), _physical_dims(h.shape)


def _text(shape) -> str:
    return shape.to_text(with_layout=False)


def shapes_compatible(a: HloInstruction, b: HloInstruction,
                      hero_of: Callable[[HloInstruction], HloInstruction] = hero) -> Decision:
    """XLA's ShapesCompatibleForMultiOutputFusion: one parallel loop can compute both.
    `hero_of` is `hero` or a memo of it (context.FusionContext.hero)."""
    h1, h2 = hero_of(a), hero_of(b)
    r1 = h1.opcode == "reduce" and reduction_is_contiguous(h1)
    r2 = h2.opcode == "reduce" and reduction_is_contiguous(h2)
    t1, t2 = is_transpose_hero(h1), is_transpose_hero(h2)
    if r1 and r2:
        same = (h1.shape.leaves()[0].dims == h2.shape.leaves()[0].dims
                and h1.operands[0].shape.dims == h2.operands[0].shape.dims
                and tuple(h1.attrs.get("dimensions", ())) == tuple(h2.attrs.get("dimensions", ())))
        if not same:
            return refuse("incompatible-reductions",
                          f"reductions {h1.name} and {h2.name} have different shapes or dimensions "
                          f"({_text(h1.operands[0].shape)} dims={list(h1.attrs.get('dimensions', ()))} vs "
                          f"{_text(h2.operands[0].shape)} dims={list(h2.attrs.get('dimensions', ()))})")
    if (r1 and t2) or (r2 and t1):
        red, tr = (h1, h2) if r1 else (h2, h1)
        return refuse("transpose-and-reduce", f"{a.name} and {b.name} cannot share a kernel: reduction {red.name} "
                                              f"and tiled transpose {tr.name} need different tilings")
    if t1 and t2 and _transpose_key(h1) != _transpose_key(h2):
        return refuse("incompatible-transposes", f"transposes {h1.name} and {h2.name} of {a.name} and {b.name} "
                                                 f"permute different dimensions")
    l1, l2 = loop_shape(h1), loop_shape(h2)
    if not same_loop(l1, l2):
        return refuse("different-loop-shapes",
                      f"{a.name} and {b.name} have different loop shapes ({_text(l1)} vs {_text(l2)})")
    return _OK


# ---- is a common operand worth sharing ---------------------------------------------------

def is_effective_scalar(inst: HloInstruction) -> bool:
    """XLA's IsProfitableOperand is false for these: a scalar (every dimension 1) or a broadcast
    of one: reading it once per kernel costs nothing, so sharing it saves nothing."""
    def scalar(i: HloInstruction) -> bool:
        return i.shape.is_array and all(d == 1 for d in i.shape.dims)

    return scalar(inst) or (inst.opcode == "broadcast" and scalar(inst.operands[0]))


def _slices_of(user: HloInstruction, parent: HloInstruction) -> list[tuple] | None:
    """The index ranges in which `user` reads `parent`, or None when it reads it otherwise."""
    if user.opcode == "slice":
        return [tuple((s[0], s[1]) for s in user.attrs["slice"])]
    if user.opcode != "fusion":
        return None
    ranges: list[tuple] = []
    for i, op in enumerate(user.operands):
        if op is not parent:
            continue
        for r in user.fused_computation.parameter(i).users:
            if r.opcode != "slice":
                return None
            ranges.append(tuple((s[0], s[1]) for s in r.attrs["slice"]))
    return ranges or None


def _overlap(x: tuple, y: tuple) -> bool:
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(x, y))


def reads_disjoint_slices(a: HloInstruction, b: HloInstruction, parent: HloInstruction) -> bool:
    """XLA's ParameterSlicesAreNonOverlapping: `a` and `b` read `parent` only through slices,
    and no slice of one overlaps a slice of the other, so they share no element of it."""
    sa, sb = _slices_of(a, parent), _slices_of(b, parent)
    if sa is None or sb is None:
        return False
    return not any(_overlap(x, y) for x in sa for y in sb)
