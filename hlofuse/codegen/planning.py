"""Splitting a fused computation into kernels.

Most fusions are one kernel: a loop kernel, or a reduction kernel whose heroes are the
root reduces (with an elementwise epilogue and elementwise side outputs; an output that reads
a reduce at another index, such as its reverse, is a loop output over the materialized reduce).
Narrow-float reduces are first rewritten into XLA:CPU's order (`tree_reduction_rewrite`). A reduce whose
value is needed elsewhere in the fusion - broadcast back into a loop (softmax), or feeding
another reduce (variance from a mean) - would be recomputed per element by its element
generator; instead it is *materialized*: computed first by its own kernel into a temporary,
which the rest of the fusion then reads like a parameter. Output leaves with different
dimensions get separate loop kernels. Across fusions, a reduction kernel may also write its
expensive input expression for a later fusion that would recompute it
(codegen/shared_expressions.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..hlo.ir import HloComputation, HloInstruction
from .kernels.args import leaf_count, output_leaves, param_leaf_count
from .kernels.cpu_loop import kernel_loop_shape
from .kernels.reduction_groups import ReductionGroup, is_order_sensitive_reduce, reduction_groups, slices_keep_init


@dataclass
class KernelPlan:
    """One kernel: the computation it emits, the output leaves it writes, its work units, and
    where its parameter leaves come from / its output leaves go to: ("in", i) a leaf of the
    fusion's operands, ("out", k) a leaf of the fusion's result, ("tmp", t) a temporary."""

    comp: HloComputation
    outputs: list[int]
    units: int
    unit_elements: int
    group: ReductionGroup | None
    inputs: list[tuple[str, int]] = field(default_factory=list)
    results: list[tuple[str, int]] = field(default_factory=list)
    name: str = ""
    stage: str = "single"  # "partial" / "combine" for a reduction split across cores
    parts: int = 1
    scratch: list[tuple[str, int]] = field(default_factory=list)
    # A kernel not made by the loop or reduction emitters (GEMM, convolution, scatter, ...):
    # the name of its emitter in codegen/cpu.py's CUSTOM_EMITTERS (part of the cache key).
    custom: str | None = None

    @property
    def pointer_count(self) -> int:
        """Buffer arguments of the kernel: its parameter leaves, output leaves and scratch."""
        return param_leaf_count(self.comp) + len(output_leaves(self.comp)) + len(self.scratch)


def _walk_reduces(inst: HloInstruction, stop: set[HloInstruction], found: dict[HloInstruction, None]) -> None:
    """Collect reduces reachable from `inst` (not descending into them or into `stop`)."""
    stack, seen = [inst], set()
    while stack:
        i = stack.pop()
        if i in seen or i in stop:
            continue
        seen.add(i)
        if i.opcode == "reduce":
            found[i] = None
            continue
        stack.extend(i.operands)


def reduces_to_materialize(comp: HloComputation) -> list[HloInstruction]:
    """Reduces of `comp` that no reduction kernel can produce as a hero."""
    leaves = output_leaves(comp)
    groups, loops = reduction_groups(comp)
    found: dict[HloInstruction, None] = {}  # an ordered set
    for k in loops:
        _walk_reduces(leaves[k].inst, set(), found)
    for g in groups:
        for k in g.extras:
            _walk_reduces(leaves[k].inst, set(), found)
        for h in g.heroes:
            for op in h.operands:
                _walk_reduces(op, set(), found)
    if len(found) < 2:  # (nearly always: no walk of the computation to order them)
        return list(found)
    order = {i: n for n, i in enumerate(comp.post_order())}
    return sorted(found, key=lambda i: order.get(i, 0))


def rebuild(comp: HloComputation, root: HloInstruction, replaced: list[HloInstruction], name: str) -> HloComputation:
    """A computation computing `root` of `comp`, with each instruction of `replaced` read from a
    new parameter numbered after comp's parameters (all of comp's parameters are kept)."""
    new = HloComputation(name)
    mapping: dict[HloInstruction, HloInstruction] = {}
    n = len(comp.parameters)
    for p in comp.parameters:
        q = p.clone()
        q.parameter_number = p.parameter_number
        mapping[p] = new.add_instruction(q)
    for j, r in enumerate(replaced):
        if r is root:
            continue
        q = HloInstruction("parameter", r.shape, name=f"materialized_{j}")
        q.parameter_number = n + j
        mapping[r] = new.add_instruction(q)
    # Post order of the instructions `root` needs, stopping at mapped ones.
    order, seen = [], set()

    def visit(i: HloInstruction) -> None:
        stack = [(i, False)]
        while stack:
            node, done = stack.pop()
            if node in mapping or node in seen and not done:
                continue
            if done:
                order.append(node)
                continue
            seen.add(node)
            stack.append((node, True))
            for op in reversed(node.operands):
                if op not in mapping and op not in seen:
                    stack.append((op, False))

    visit(root)
    for i in order:
        mapping[i] = new.add_instruction(i.clone(operands=[mapping[o] for o in i.operands]))
    new.root = mapping[root]
    return new


# ---- XLA:CPU's order for narrow-float reductions ----------------------------------------------
#
# A reduce into bf16/f16/f8 rounds its accumulator to that type after every step on XLA:CPU
# (float normalization computes the reducer's ops in f32 and converts back), so the order of
# the steps decides the result. XLA:CPU's order comes from TreeReductionRewriter (window 32):
# while a reduced dimension is longer than 32, reduce(x) becomes reduce(reduce-window(x)) with
# windows of min(n, 32) along every reduced dimension, stride = window, "same" padding (skipped
# positions) and the init value starting every window; each window and the last reduce fold
# sequentially in row-major order. hlofuse applies the same rewrite to the computation it
# plans (the fused module it prints keeps the plain reduce), keeps the reduction kernels of
# such reduces sequential (no split across cores, one GPU thread per output), and the
# interpreter computes the same order (runtime/interpreter/reduction.py), so every backend
# gives XLA:CPU's bits. Variadic reduces are not rewritten (XLA does not either).

TREE_REDUCTION_WINDOW = 32


def _tree_level(x: HloInstruction, init: HloInstruction, rdims: list[int], reducer) -> HloInstruction:
    """One TreeReductionRewriter step: reduce-window of x over windows of min(n, 32) along
    the reduced dimensions, "same" padding (the smaller half low)."""
    from ..hlo.attributes import Window, WindowDimension
    from ..hlo.shapes import array

    dims, out = [], []
    for d, n in enumerate(x.shape.dims):
        if d not in rdims:
            dims.append(WindowDimension())
            out.append(n)
            continue
        w = min(n, TREE_REDUCTION_WINDOW)
        count = -(-n // w)
        total = count * w - n
        dims.append(WindowDimension(size=w, stride=w, padding_low=total // 2, padding_high=total - total // 2))
        out.append(count)
    return HloInstruction("reduce-window", array(x.shape.dtype, out), [x, init],
                          {"window": Window(tuple(dims)), "to_apply": reducer}, name=f"{x.name}.tree")


def tree_reduction_rewrite(comp: HloComputation) -> HloComputation:
    """`comp`, or a copy of it whose order-sensitive reduces (`is_order_sensitive_reduce`)
    with a reduced dimension longer than the window are rewritten into XLA:CPU's tree of
    reduce-windows (see above); the parameters are kept."""
    def needs(i: HloInstruction) -> bool:
        # An empty operand reduces to its init in any order (and a window of its 0-long
        # dimension would be 0 wide: the large-graph fuzzer, seed 49).
        dims = i.operands[0].shape.dims if i.opcode == "reduce" else ()
        return (is_order_sensitive_reduce(i) and 0 not in dims
                and any(dims[d] > TREE_REDUCTION_WINDOW for d in i.attrs["dimensions"]))

    if not any(needs(i) for i in comp.instructions):
        return comp
    new = HloComputation(f"{comp.name}.tree")
    mapping: dict[HloInstruction, HloInstruction] = {}
    for p in comp.parameters:
        q = p.clone()
        q.parameter_number = p.parameter_number
        mapping[p] = new.add_instruction(q)
    for i in comp.post_order():
        if i in mapping:
            continue
        operands = [mapping[o] for o in i.operands]
        if needs(i):
            x, init = operands
            rdims = sorted(int(d) for d in i.attrs["dimensions"])
            while any(x.shape.dims[d] > TREE_REDUCTION_WINDOW for d in rdims):
                x = new.add_instruction(_tree_level(x, init, rdims, i.attrs["to_apply"]))
            operands = [x, init]
        mapping[i] = new.add_instruction(i.clone(operands=operands))
    new.root = mapping[comp.root]
    return new


def plan_fusion(comp: HloComputation, name: str, operands=()) -> tuple[list[KernelPlan], list]:
    """Kernels (in execution order) computing the fused computation `comp`, and the shapes of
    the temporaries they exchange. Narrow-float reduces are first rewritten into XLA:CPU's
    order (`tree_reduction_rewrite`); the reduce-windows of the tree are computed inside the
    reduction kernel's fold, which keeps them out of loop kernels (those may reassociate a
    reducer: the elemental emitter's call_scalar). `operands`: the caller's operands of
    `comp`'s parameters, by number, where known (a reduce's init outside the fusion is then
    seen to be a constant: `slices_keep_init`)."""
    constants = {k: op for k, op in enumerate(operands) if op.opcode == "constant"}
    comp = tree_reduction_rewrite(comp)
    temps: list = []
    kernels: list[KernelPlan] = []
    n_params = len(comp.parameters)
    in_offsets, acc = [], 0
    for p in comp.parameters:
        in_offsets.append(acc)
        acc += leaf_count(p.shape)
    materialized = reduces_to_materialize(comp)
    tmp_offsets = []
    for r in materialized:
        tmp_offsets.append(len(temps))
        temps.extend(r.shape.leaves() if r.shape.is_tuple else [r.shape])

    def inputs_of(c: HloComputation) -> list[tuple[str, int]]:
        out = []
        for p in c.parameters:
            k = p.parameter_number
            count = leaf_count(p.shape)
            if k < n_params:
                out.extend(("in", in_offsets[k] + j) for j in range(count))
            else:
                out.extend(("tmp", tmp_offsets[k - n_params] + j) for j in range(count))
        return out

    for j, r in enumerate(materialized):
        sub = rebuild(comp, r, materialized, f"{comp.name}.reduce{j}")
        for kp in _kernels_of(sub, f"{name}_m{j}", temps, constants):
            kp.inputs = inputs_of(sub)
            kp.results = [("tmp", tmp_offsets[j] + q) for q in range(len(output_leaves(sub)))]
            kernels.append(kp)
    main = rebuild(comp, comp.root, materialized, f"{comp.name}.main") if materialized else comp
    for kp in _kernels_of(main, name, temps, constants):
        kp.inputs = inputs_of(main)
        kp.results = [("out", q) for q in range(len(output_leaves(main)))]
        kernels.append(kp)
    return kernels, temps


# A reduction with fewer work units than this (outputs of a row reduction, column blocks of a
# column reduction: batch-norm statistics of 96 channels are one block), over at least
# SPLIT_MIN_ELEMENTS elements per unit, is split into SPLIT_PARTS slices of its outermost
# reduced dimension (so all cores share it), then the slices are combined.
SPLIT_MAX_OUTPUTS = 16
SPLIT_MIN_ELEMENTS = 1 << 17
SPLIT_PARTS = 16


def _kernels_of(comp: HloComputation, name: str, temps: list, constants: dict | None = None) -> list[KernelPlan]:
    """Reduction kernels for the reduction groups and loop kernels per output dimensions
    (`constants`: the caller's constant operands by parameter number, see `plan_fusion`)."""
    from ..hlo.shapes import ArrayShape

    leaves = output_leaves(comp)
    groups, loops = reduction_groups(comp)
    plans = []
    for g in groups:
        r0 = g.split_extent
        sequential = any(is_order_sensitive_reduce(h) for h in g.heroes)  # XLA:CPU's order, not slices
        if (g.units < SPLIT_MAX_OUTPUTS and g.unit_elements >= SPLIT_MIN_ELEMENTS and r0 >= 2
                and not sequential and all(slices_keep_init(h, constants) for h in g.heroes)):
            parts = min(SPLIT_PARTS, r0)
            n_out = g.out_elements  # the combine kernel's units: one per output
            scratch = []
            for h in g.heroes:
                for init in h.operands[len(h.operands) // 2:]:
                    scratch.append(("tmp", len(temps)))
                    temps.append(ArrayShape(init.shape.dtype, (parts * n_out,)))
            plans.append(KernelPlan(comp, g.extras, parts * g.units, g.unit_elements // parts, g,
                                    name=f"{name}_r{len(plans)}p", stage="partial", parts=parts, scratch=scratch))
            plans.append(KernelPlan(comp, g.epilogue, n_out, parts, g, name=f"{name}_r{len(plans)}c",
                                    stage="combine", parts=parts, scratch=scratch))
            continue
        plans.append(KernelPlan(comp, g.outputs, g.units, g.unit_elements, g, name=f"{name}_r{len(plans)}"))
    by_dims: dict[tuple, list[int]] = {}
    for k in loops:
        by_dims.setdefault(tuple(leaves[k].shape.dims), []).append(k)
    for ks in by_dims.values():
        ls = kernel_loop_shape(comp, [leaves[k] for k in ks])
        plans.append(KernelPlan(comp, ks, ls.units, ls.unit_elements, None, name=f"{name}_l{len(plans)}"))
    return plans



# Small float dots (at most this many terms per output and this many multiply-adds) are
# computed by a kernel that sums term by term in increasing contracting index, in the result's
# precision (at least f32), as XLA's naive dot loops and the StableHLO reference do, so tiny
# conformance dots agree to the ulp. Anything bigger goes to BLAS (as XLA:CPU goes to Eigen):
# an in-order kernel was 1.5-2x slower than XLA on the attention and LSTM workloads.
SEQUENTIAL_DOT_TERMS = 256
SEQUENTIAL_DOT_WORK = 1 << 16


def sequential_dot(inst: HloInstruction) -> HloComputation | None:
    """A computation that computes float `dot` instruction `inst` as a reduction of broadcast
    products over the contracting dimension (a column reduction, vectorized over the output's
    minor dimension), or None when the dot is too large or not a float dot."""
    from ..hlo.shapes import array

    out = inst.shape
    if not out.is_array or not (out.dtype.is_float or out.dtype.is_complex) or out.dtype.bits < 16:
        return None
    lhs, rhs = inst.operands
    a = inst.attrs
    lb, lc = list(a.get("lhs_batch_dims", ())), list(a.get("lhs_contracting_dims", ()))
    rb, rc = list(a.get("rhs_batch_dims", ())), list(a.get("rhs_contracting_dims", ()))
    ld, rd = tuple(lhs.shape.dims), tuple(rhs.shape.dims)
    lf = [d for d in range(len(ld)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rd)) if d not in rb and d not in rc]
    B, M = math.prod(ld[d] for d in lb), math.prod(ld[d] for d in lf)
    K, N = math.prod(ld[d] for d in lc), math.prod(rd[d] for d in rf)
    if K > SEQUENTIAL_DOT_TERMS or K * B * M * N > SEQUENTIAL_DOT_WORK or K == 0:
        return None
    acc_t = out.dtype if out.dtype.bits >= 32 or out.dtype.is_complex else array("f32").dtype
    comp = HloComputation(f"dot.{inst.name}")

    def add(opcode, shape, operands, **attrs):
        return comp.add_instruction(HloInstruction(opcode, shape, operands, attrs, name=opcode))

    params = []
    for i, op in enumerate((lhs, rhs)):
        p = HloInstruction("parameter", op.shape, name=f"param_{i}")
        p.parameter_number = i
        params.append(comp.add_instruction(p))

    def canonical(p, perm, dims3):
        t = add("transpose", array(p.shape.dtype, [p.shape.dims[d] for d in perm]), [p], dimensions=tuple(perm))
        r = add("reshape", array(p.shape.dtype, dims3), [t])
        return add("convert", array(acc_t, dims3), [r]) if p.shape.dtype != acc_t else r

    bd, fd, gd = [ld[d] for d in lb], [ld[d] for d in lf], [rd[d] for d in rf]
    x = canonical(params[0], lb + lf + lc, bd + fd + [K])
    y = canonical(params[1], rb + rc + rf, bd + [K] + gd)
    nb, nf = len(bd), len(fd)
    full = array(acc_t, bd + fd + [K] + gd)  # the result's dimensions with K inserted
    xb = add("broadcast", full, [x], dimensions=tuple(range(nb + nf + 1)))
    yb = add("broadcast", full, [y], dimensions=tuple(range(nb)) + tuple(range(nb + nf, len(full.dims))))
    prod = add("multiply", full, [xb, yb])
    reducer = HloComputation(f"dot.{inst.name}.add")
    ra = HloInstruction("parameter", array(acc_t, ()), name="a")
    ra.parameter_number = 0
    rb_ = HloInstruction("parameter", array(acc_t, ()), name="b")
    rb_.parameter_number = 1
    reducer.add_instruction(ra)
    reducer.add_instruction(rb_)
    reducer.root = reducer.add_instruction(HloInstruction("add", array(acc_t, ()), [ra, rb_], name="sum"))
    zero = HloInstruction("constant", array(acc_t, ()), name="zero")
    import numpy as np

    zero.literal = np.zeros((), acc_t.numpy)
    zero = comp.add_instruction(zero)
    red = add("reduce", array(acc_t, out.dims), [prod, zero], dimensions=(nb + nf,), to_apply=reducer)
    comp.root = add("convert", array(out.dtype, out.dims), [red]) if acc_t != out.dtype else red
    return comp
