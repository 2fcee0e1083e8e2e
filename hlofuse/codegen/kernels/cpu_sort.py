"""Sort and top-k as compiled CPU kernels (custom "sort" and "topk").

    planned = plan_sort(comp, name)     # ([KernelPlan], [temp shapes]) or None
    emit_sort_kernel(skel, plan)        # CUSTOM_EMITTERS["sort"]
    plan_topk / emit_topk_kernel        # CUSTOM_EMITTERS["topk"]

A sort's work units are its rows: every position of the dimensions other than the sort
dimension, so threads split the rows. Per row the kernel orders an index permutation (i32,
in a scratch temporary of `n + ceil(n/2)` indices per row: the permutation and a merge
buffer of half a row) and then gathers every operand through it, copying raw bits, so NaN
payloads and -0 come out unchanged.

The order is the one the reference interpreter defines for every comparator
(runtime/interpreter/sort.py `comparator_sort_order`): XLA:CPU's own algorithm, libstdc++'s
std::stable_sort with a buffer of half the row (insertion-sorted runs of 7, merge passes
into the buffer and back, then an adaptive merge of the halves), and for an unstable sort of
at most 16 elements std::sort's insertion sort. Each comparison calls the comparator
computation, inlined through the element generators, on the two elements' values of every
operand, so any comparator the interpreter supports gives the interpreter's permutation,
including comparators that are no strict weak order (LE, constants, LT over NaN), for which
XLA's algorithm, not just "a stable order", defines the result.

topk (largest or smallest first, ties by lower index, floats in total order) keeps a sorted
list of k indices per row that each element enters by insertion (strictly better elements
only, so ties keep the lower index first): on most data few elements enter, so a row costs
about n comparisons (an entering element finds its place by binary search). For k above
`TOPK_INSERTION_MAX` the insertions have a budget (half the comparisons of sorting the row); a
row that exceeds it (nearly sorted data, k close to n) runs
the stable sort above under the total-order comparator instead and keeps the first k.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator

from llvmlite import ir

from ...emitters.cpu.target import add_string_attribute
from ...emitters.elemental import ElementalEmitter, mem_type
from ...emitters.elemental_control import emitted_inline
from ...emitters.ir_helpers import I1, I32, I64, const_i64, for_range, load_element
from ...hlo.dtypes import element_type
from ...hlo.errors import UnsupportedError
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import array
from .args import output_leaves

I8P = ir.IntType(8).as_pointer()
I32P = I32.as_pointer()
CHUNK = 7  # libstdc++'s _S_chunk_size: runs first sorted by insertion
INSERTION_LIMIT = 16  # libstdc++'s _S_threshold: std::sort of this many is one insertion sort
TOPK_INSERTION_MAX = 16  # up to this k topk's insertions run unbudgeted (at most k*n steps)
_S32 = element_type("s32")  # the permutation's element type

Less = Callable[[ir.IRBuilder, list, list], ir.Value]  # (builder, lhs values, rhs values) -> i1


def _flag(inst: HloInstruction, name: str, default: bool) -> bool:
    v = inst.attrs.get(name)
    return default if v is None else str(v).lower() in ("true", "1")


def sort_root(comp: HloComputation) -> HloInstruction | None:
    """The sort `comp` computes from its parameters (a wrapped unfused sort), else None: also
    when the comparator cannot be inlined (an op without an element generator, or a while
    loop over an array state), which keeps the sort on its library rule."""
    root = comp.root
    if root.opcode != "sort" or any(op.opcode != "parameter" for op in root.operands):
        return None
    dims = [int(d) for d in root.attrs.get("dimensions", ())]
    if len(dims) != 1 or root.operands[0].shape.rank == 0 or not _inlinable(root.attrs["to_apply"]):
        return None
    return root


def _inlinable(comp: HloComputation) -> bool:
    """Every instruction of `comp`, and of the computations it calls, is emitted by the element
    generators (emitters/elemental_control.emitted_inline: a while or conditional over arrays
    is not)."""
    stack, seen = [comp], set()
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        for inst in c.instructions:
            if inst.opcode != "parameter" and not emitted_inline(inst):
                return False
            stack.extend(inst.called_computations())
    return True


def topk_root(comp: HloComputation) -> HloInstruction | None:
    """The topk `comp` computes from its parameter, else None."""
    root = comp.root
    if root.opcode != "topk" or root.operands[0].opcode != "parameter" or root.operands[0].shape.rank == 0:
        return None
    return root


def _row_geometry(dims: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """(rows, n, inner): the rows of an array sorted along `dim`, the row length, and the
    stride between a row's elements (the product of the dimensions after `dim`)."""
    n = dims[dim]
    total = math.prod(dims)
    return (total // n if n else 0), n, math.prod(dims[dim + 1:])


def _scratch_per_row(n: int) -> int:
    return n + (n + 1) // 2  # the permutation and a merge buffer of half a row


def plan_sort(comp: HloComputation, name: str) -> tuple[list, list] | None:
    """The sort kernel of `comp` and its temporary (the rows' permutations), or None."""
    from ..planning import KernelPlan  # planning imports the kernel modules

    sort = sort_root(comp)
    if sort is None:
        return None
    dim = int(sort.attrs["dimensions"][0]) % sort.operands[0].shape.rank
    rows, n, _ = _row_geometry(tuple(sort.operands[0].shape.dims), dim)
    n_ops = len(sort.operands)
    temps = [array("s32", (max(rows * _scratch_per_row(n), 1),))]
    kernel = KernelPlan(comp, list(range(n_ops)), rows, max(n, 1) * max(1, n.bit_length()), None,
                        name=f"{name}_sort", inputs=[("in", i) for i in range(n_ops)],
                        results=[("out", q) for q in range(n_ops)], scratch=[("tmp", 0)], custom="sort")
    return [kernel], temps


def plan_topk(comp: HloComputation, name: str) -> tuple[list, list] | None:
    """The topk kernel of `comp` and its temporary (per-row index lists), or None."""
    from ..planning import KernelPlan

    topk = topk_root(comp)
    if topk is None:
        return None
    dims = tuple(topk.operands[0].shape.dims)
    rows, n, _ = _row_geometry(dims, len(dims) - 1)
    k = int(str(topk.attrs["k"]))
    if k > n:
        raise UnsupportedError(f"topk {topk.name}: k={k} exceeds the row length {n}")
    per_row = k if k <= TOPK_INSERTION_MAX else _scratch_per_row(n)  # room for the fallback sort
    temps = [array("s32", (max(rows * per_row, 1),))]
    kernel = KernelPlan(comp, [0, 1], rows, max(n, 1) * max(1, min(k, n.bit_length())), None,
                        name=f"{name}_topk", inputs=[("in", 0)], results=[("out", 0), ("out", 1)],
                        scratch=[("tmp", 0)], custom="topk")
    return [kernel], temps


# ---- the sort algorithm in LLVM IR ------------------------------------------------------------

@contextmanager
def _while(b: ir.IRBuilder, cond: Callable[[], ir.Value], name: str) -> Iterator[None]:
    """`while (cond()) { body }`: cond() emits the test in the loop header (it may branch)."""
    header = b.append_basic_block(name + ".cond")
    body = b.append_basic_block(name + ".body")
    done = b.append_basic_block(name + ".end")
    b.branch(header)
    b.position_at_end(header)
    b.cbranch(cond(), body, done)
    b.position_at_end(body)
    yield
    b.branch(header)
    b.position_at_end(done)


def _and_then(b: ir.IRBuilder, first: ir.Value, second: Callable[[], ir.Value]) -> ir.Value:
    """`first && second()`, second() emitted (and its comparator called) only when first holds."""
    start = b.block
    rhs = b.append_basic_block("and.rhs")
    join = b.append_basic_block("and.join")
    b.cbranch(first, rhs, join)
    b.position_at_end(rhs)
    value = second()
    rhs_end = b.block
    b.branch(join)
    b.position_at_end(join)
    phi = b.phi(I1)
    phi.add_incoming(ir.Constant(I1, 0), start)
    phi.add_incoming(value, rhs_end)
    return phi


class SortEmitter:
    """Emits, into `module`, internal functions implementing `comparator_sort_order` over an
    i32 permutation of one row. Every function takes the row context first: one i8* per
    operand and the row's base element offset; `less` compares elements i and j of the row.

    `less_values(b, lhs, rhs)` emits the comparison of two elements given their values
    (one per operand); `types` are the operands' element types; `stride` the distance in
    elements between neighbours of a row."""

    def __init__(self, module: ir.Module, prefix: str, types: list, stride: int, less_values: Less) -> None:
        self.module, self.prefix, self.types, self.stride = module, prefix, types, stride
        self.less_values = less_values
        self.ctx_types = [I8P] * len(types) + [I64]
        self._fns: dict[str, ir.Function] = {}
        self.less = self._emit_less()
        self.insertion = self._emit_insertion()
        self.move_merge = self._emit_move_merge()
        self.merge_loop = self._emit_merge_loop()
        self.merge_with_buffer = self._emit_merge_with_buffer()
        self.merge_adaptive = self._emit_merge_adaptive()

    def _function(self, name: str, extra: list[ir.Type], ret: ir.Type = ir.VoidType()):
        fn = ir.Function(self.module, ir.FunctionType(ret, self.ctx_types + extra), f"{self.prefix}.{name}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        # Called from the kernel, which runs with denormals flushed (cpu_skeleton.py).
        add_string_attribute(fn, "denormal-fp-math", "preserve-sign,preserve-sign")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        nctx = len(self.ctx_types)
        return fn, b, list(fn.args[:nctx]), list(fn.args[nctx:])

    @staticmethod
    def _var(b: ir.IRBuilder, init: ir.Value, name: str) -> ir.Value:
        slot = entry_alloca(b, init.type, name)
        b.store(init, slot)
        return slot

    def _emit_less(self) -> ir.Function:
        fn, b, ctx, (i, j) = self._function("less", [I64, I64], I1)
        base = ctx[-1]
        lhs, rhs = [], []
        for ptr, et in zip(ctx[:-1], self.types):
            typed = b.bitcast(ptr, mem_type(et).as_pointer())
            for idx, out in ((i, lhs), (j, rhs)):
                at = b.add(base, b.mul(idx, const_i64(self.stride)))
                out.append(load_element(b, b.gep(typed, [at], inbounds=True), et))
        b.ret(self.less_values(b, lhs, rhs))
        return fn

    def call_less(self, b: ir.IRBuilder, ctx: list, i: ir.Value, j: ir.Value) -> ir.Value:
        """less(element i, element j) of the row; i and j are i32 or i64 element indices."""
        return b.call(self.less, ctx + [_i64(b, i), _i64(b, j)])

    def _emit_insertion(self) -> ir.Function:
        """std::__insertion_sort over a[lo, hi) (see interpreter/sort.py `_insertion_sort`)."""
        fn, b, ctx, (a, lo, hi) = self._function("insertion", [I32P, I64, I64])
        k = entry_alloca(b, I64, "k")
        with for_range(b, b.add(lo, const_i64(1)), hi, "i") as i:
            v = b.load(b.gep(a, [i]))
            first = b.load(b.gep(a, [lo]))
            with b.if_else(self.call_less(b, ctx, v, first)) as (front, other):
                with front:  # shift a[lo, i) up by one, v to the front
                    with for_range(b, const_i64(0), b.sub(i, lo), "s") as s:
                        at = b.sub(i, s)
                        b.store(b.load(b.gep(a, [b.sub(at, const_i64(1))])), b.gep(a, [at]))
                    b.store(v, b.gep(a, [lo]))
                with other:
                    b.store(i, k)
                    with _while(b, lambda: _and_then(b, b.icmp_signed(">", b.load(k), lo), lambda: self.call_less(
                            b, ctx, v, b.load(b.gep(a, [b.sub(b.load(k), const_i64(1))])))), "back"):
                        kk = b.load(k)
                        b.store(b.load(b.gep(a, [b.sub(kk, const_i64(1))])), b.gep(a, [kk]))
                        b.store(b.sub(kk, const_i64(1)), k)
                    b.store(v, b.gep(a, [b.load(k)]))
        b.ret_void()
        return fn

    def _emit_move_merge(self) -> ir.Function:
        """std::__move_merge of x[0, xn) and y[0, yn) into out: y's head only when less than x's."""
        fn, b, ctx, (x, xn, y, yn, out) = self._function("move_merge", [I32P, I64, I32P, I64, I32P])
        i, j = self._var(b, const_i64(0), "i"), self._var(b, const_i64(0), "j")
        with _while(b, lambda: b.and_(b.icmp_signed("<", b.load(i), xn), b.icmp_signed("<", b.load(j), yn)), "m"):
            iv, jv = b.load(i), b.load(j)
            xe, ye = b.load(b.gep(x, [iv])), b.load(b.gep(y, [jv]))
            take_y = self.call_less(b, ctx, ye, xe)
            b.store(b.select(take_y, ye, xe), b.gep(out, [b.add(iv, jv)]))
            b.store(b.select(take_y, b.add(jv, const_i64(1)), jv), j)
            b.store(b.select(take_y, iv, b.add(iv, const_i64(1))), i)
        iv, jv = b.load(i), b.load(j)
        with for_range(b, iv, xn, "rx") as r:
            b.store(b.load(b.gep(x, [r])), b.gep(out, [b.add(r, jv)]))
        with for_range(b, jv, yn, "ry") as r:
            b.store(b.load(b.gep(y, [r])), b.gep(out, [b.add(r, xn)]))
        b.ret_void()
        return fn

    def _emit_merge_loop(self) -> ir.Function:
        """std::__merge_sort_loop: merge neighbouring runs of `step` of src[0, n) into out."""
        fn, b, ctx, (src, n, out, step) = self._function("merge_loop", [I32P, I64, I32P, I64])
        i = self._var(b, const_i64(0), "i")
        two = b.mul(step, const_i64(2))
        with _while(b, lambda: b.icmp_signed(">=", b.sub(n, b.load(i)), two), "pairs"):
            iv = b.load(i)
            b.call(self.move_merge, ctx + [b.gep(src, [iv]), step, b.gep(src, [b.add(iv, step)]), step,
                                           b.gep(out, [iv])])
            b.store(b.add(iv, two), i)
        iv = b.load(i)
        rest = b.sub(n, iv)
        tail = b.select(b.icmp_signed("<", rest, step), rest, step)
        b.call(self.move_merge, ctx + [b.gep(src, [iv]), tail, b.gep(src, [b.add(iv, tail)]), b.sub(rest, tail),
                                       b.gep(out, [iv])])
        b.ret_void()
        return fn

    def _emit_merge_with_buffer(self) -> ir.Function:
        """std::__merge_sort_with_buffer over a[0, n) with buffer buf (n elements)."""
        fn, b, ctx, (a, n, buf) = self._function("merge_sort", [I32P, I64, I32P])
        i = self._var(b, const_i64(0), "i")
        with _while(b, lambda: b.icmp_signed(">=", b.sub(n, b.load(i)), const_i64(CHUNK)), "chunks"):
            iv = b.load(i)
            b.call(self.insertion, ctx + [a, iv, b.add(iv, const_i64(CHUNK))])
            b.store(b.add(iv, const_i64(CHUNK)), i)
        b.call(self.insertion, ctx + [a, b.load(i), n])
        step = self._var(b, const_i64(CHUNK), "step")
        with _while(b, lambda: b.icmp_signed("<", b.load(step), n), "passes"):
            b.call(self.merge_loop, ctx + [a, n, buf, b.load(step)])
            b.store(b.mul(b.load(step), const_i64(2)), step)
            b.call(self.merge_loop, ctx + [buf, n, a, b.load(step)])
            b.store(b.mul(b.load(step), const_i64(2)), step)
        b.ret_void()
        return fn

    def _emit_merge_adaptive(self) -> ir.Function:
        """std::__merge_adaptive of a[0, mid) and a[mid, n) through buf (forward when the first
        run is the shorter, else backward comparing the runs' tails)."""
        fn, b, ctx, (a, mid, n, buf) = self._function("merge_adaptive", [I32P, I64, I64, I32P])
        xn, yn = mid, b.sub(n, mid)
        with b.if_else(b.icmp_signed("<=", xn, yn)) as (forward, backward):
            with forward:  # x to the buffer, merged forward into a (writes never pass y's reads)
                with for_range(b, const_i64(0), xn, "cx") as r:
                    b.store(b.load(b.gep(a, [r])), b.gep(buf, [r]))
                b.call(self.move_merge, ctx + [buf, xn, b.gep(a, [mid]), yn, a])
            with backward:  # y to the buffer, merged from the back
                y = buf
                with for_range(b, const_i64(0), yn, "cy") as r:
                    b.store(b.load(b.gep(a, [b.add(mid, r)])), b.gep(y, [r]))
                i = self._var(b, b.sub(xn, const_i64(1)), "bi")
                j = self._var(b, b.sub(yn, const_i64(1)), "bj")
                r = self._var(b, n, "br")
                with _while(b, lambda: b.and_(b.icmp_signed(">=", b.load(i), const_i64(0)),
                                              b.icmp_signed(">=", b.load(j), const_i64(0))), "back"):
                    iv, jv = b.load(i), b.load(j)
                    rv = b.sub(b.load(r), const_i64(1))
                    b.store(rv, r)
                    xe, ye = b.load(b.gep(a, [iv])), b.load(b.gep(y, [jv]))
                    take_x = self.call_less(b, ctx, ye, xe)
                    b.store(b.select(take_x, xe, ye), b.gep(a, [rv]))
                    b.store(b.select(take_x, b.sub(iv, const_i64(1)), iv), i)
                    b.store(b.select(take_x, jv, b.sub(jv, const_i64(1))), j)
                # What is left of x is already in place; what is left of y goes to the front.
                with for_range(b, const_i64(0), b.add(b.load(j), const_i64(1)), "ly") as q:
                    b.store(b.load(b.gep(y, [q])), b.gep(a, [q]))
        b.ret_void()
        return fn

    def order(self, b: ir.IRBuilder, ctx: list, perm: ir.Value, buf: ir.Value, n: int, stable: bool) -> None:
        """Emit comparator_sort_order for a row of `n` (static) into perm[0, n) (which holds
        0..n-1), with buf holding ceil(n/2) indices."""
        if n < 2:
            return
        if not stable and n <= INSERTION_LIMIT:
            b.call(self.insertion, ctx + [perm, const_i64(0), const_i64(n)])
            return
        half = (n + 1) // 2
        b.call(self.merge_with_buffer, ctx + [perm, const_i64(half), buf])
        b.call(self.merge_with_buffer, ctx + [b.gep(perm, [const_i64(half)]), const_i64(n - half), buf])
        b.call(self.merge_adaptive, ctx + [perm, const_i64(half), const_i64(n), buf])


def entry_alloca(b: ir.IRBuilder, ty: ir.Type, name: str) -> ir.Value:
    """A stack slot allocated at the start of the function's entry block (where LLVM promotes it
    to registers; an alloca inside a loop would grow the stack every iteration)."""
    entry = b.function.entry_basic_block
    if b.block is entry:  # inserting at the start would move b's own position
        return b.alloca(ty, name=name)
    eb = ir.IRBuilder(entry)
    eb.position_at_start(entry)
    return eb.alloca(ty, name=name)


def _i64(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return b.sext(v, I64) if v.type != I64 else v


def row_base(b: ir.IRBuilder, row: ir.Value, n: int, inner: int) -> ir.Value:
    """Offset of element 0 of row `row` (rows run over the dimensions before and after the
    sorted one; `inner` is the product of those after it)."""
    if inner == 1:
        return b.mul(row, const_i64(n))
    outer, pos = b.udiv(row, const_i64(inner)), b.urem(row, const_i64(inner))
    return b.add(b.mul(outer, const_i64(n * inner)), pos)


def init_permutation(b: ir.IRBuilder, perm: ir.Value, n: int) -> None:
    """perm[i] = i for i < n."""
    with for_range(b, const_i64(0), const_i64(n), "init") as i:
        b.store(b.trunc(i, I32), b.gep(perm, [i]))


def gather_row(b: ir.IRBuilder, srcs: list, dsts: list, perm: ir.Value, count: int, base: ir.Value,
               inner: int, dst_base: ir.Value | None = None, dst_inner: int | None = None) -> None:
    """dst[i] = src[perm[i]] along the row for i < count, raw bits for each (src, dst) pair."""
    dst_base = base if dst_base is None else dst_base
    dst_inner = inner if dst_inner is None else dst_inner
    with for_range(b, const_i64(0), const_i64(count), "gather") as i:
        p = b.sext(b.load(b.gep(perm, [i])), I64)
        at = b.add(base, b.mul(p, const_i64(inner)))
        to = b.add(dst_base, b.mul(i, const_i64(dst_inner)))
        for s, d in zip(srcs, dsts):
            b.store(b.load(b.gep(s, [at], inbounds=True)), b.gep(d, [to], inbounds=True))


def emit_sort_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with sort kernel `plan` (custom="sort")."""
    sort = sort_root(plan.comp)
    dims = tuple(sort.operands[0].shape.dims)
    dim = int(sort.attrs["dimensions"][0]) % len(dims)
    _, n, inner = _row_geometry(dims, dim)
    types = [op.shape.dtype for op in sort.operands]
    comparator = sort.attrs["to_apply"]
    b = skel.builder

    def less_values(fb: ir.IRBuilder, lhs: list, rhs: list) -> ir.Value:
        em = ElementalEmitter(fb, skel.target, _no_parameters)
        args = [v for pair in zip(lhs, rhs) for v in pair]
        value = em.call_scalar(comparator, args)
        return value if value.type == I1 else fb.icmp_unsigned("!=", value, ir.Constant(value.type, 0))

    sorter = SortEmitter(b.module, skel.function.name, types, inner, less_values)
    ins = [skel.function.args[k] for k in range(len(types))]
    srcs = [b.bitcast(p, mem_type(et).as_pointer()) for p, et in zip(ins, types)]
    dsts = [skel.output_ptr(k) for k in range(len(types))]
    dsts = [b.bitcast(d, mem_type(et).as_pointer()) for d, et in zip(dsts, types)]
    scratch = skel.scratch_ptr(0, _S32)
    stable = _flag(sort, "is_stable", False)
    per_row = _scratch_per_row(n)
    with for_range(b, skel.begin, skel.end, "row") as row:
        base = row_base(b, row, n, inner)
        perm = b.gep(scratch, [b.mul(row, const_i64(per_row))])
        init_permutation(b, perm, n)
        sorter.order(b, ins + [base], perm, b.gep(perm, [const_i64(n)]), n, stable)
        gather_row(b, srcs, dsts, perm, n, base, inner)
    skel.finish()


def _no_parameters(p: HloInstruction):
    raise UnsupportedError(f"a sort comparator reads parameter {p.name} outside an inlined call")




def total_order_less(et, largest: bool) -> Less:
    """A `less` for topk: element a goes before b when it is larger (or smaller) in XLA's
    total order (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN; integers by value)."""

    def key(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
        if et.is_float:
            bits = ir.IntType(et.bits)
            raw = v if isinstance(v.type, ir.IntType) else b.bitcast(v, bits)
            # Negative floats: flip every bit but the sign, so their order reverses as signed ints.
            mask = b.lshr(b.ashr(raw, ir.Constant(bits, et.bits - 1)), ir.Constant(bits, 1))
            return b.xor(raw, mask)
        return v

    signed = et.is_float or (et.is_integer and et.name.startswith("s"))

    def less(b: ir.IRBuilder, lhs: list, rhs: list) -> ir.Value:
        a, c = key(b, lhs[0]), key(b, rhs[0])
        op = ">" if largest else "<"
        return b.icmp_signed(op, a, c) if signed else b.icmp_unsigned(op, a, c)

    return less


def emit_topk_kernel(skel, plan) -> None:
    """Fill CPU kernel skeleton `skel` with topk kernel `plan` (custom="topk")."""
    topk = topk_root(plan.comp)
    et = topk.operands[0].shape.dtype
    dims = tuple(topk.operands[0].shape.dims)
    n = dims[-1]
    k = int(str(topk.attrs["k"]))
    largest = _flag(topk, "largest", True)
    b = skel.builder
    sorter = SortEmitter(b.module, skel.function.name, [et], 1, total_order_less(et, largest))
    x = skel.function.args[0]
    src = b.bitcast(x, mem_type(et).as_pointer())
    values = b.bitcast(skel.output_ptr(0), mem_type(et).as_pointer())
    index_et = output_leaves(plan.comp)[1].shape.dtype
    indices = b.bitcast(skel.output_ptr(1), mem_type(index_et).as_pointer())
    scratch = skel.scratch_ptr(0, _S32)
    budgeted = k > TOPK_INSERTION_MAX
    per_row = _scratch_per_row(n) if budgeted else k
    # Insertion steps allowed before a row is sorted instead: half a merge sort's comparisons.
    budget = max(n, n * max(1, (n - 1).bit_length()) // 2) if budgeted else None
    with for_range(b, skel.begin, skel.end, "row") as row:
        base = b.mul(row, const_i64(n))
        ctx = [x, base]
        best = b.gep(scratch, [b.mul(row, const_i64(per_row))])
        over = _topk_insert(b, sorter, ctx, best, n, k, budget)
        if over is not None:
            with b.if_then(over):
                init_permutation(b, best, n)
                sorter.order(b, ctx, best, b.gep(best, [const_i64(n)]), n, True)
        out_base = b.mul(row, const_i64(k))
        gather_row(b, [src], [values], best, k, base, 1, out_base, 1)
        with for_range(b, const_i64(0), const_i64(k), "idx") as q:
            v = b.load(b.gep(best, [q]))
            ty = mem_type(index_et)
            v = v if ty == I32 else (b.sext(v, ty) if ty.width > 32 else b.trunc(v, ty))
            b.store(v, b.gep(indices, [b.add(out_base, q)], inbounds=True))
    skel.finish()


def _topk_insert(b: ir.IRBuilder, sorter: SortEmitter, ctx: list, best: ir.Value, n: int, k: int,
                 budget: int | None) -> ir.Value | None:
    """best[0, k) = the first k indices of the row under sorter's `less`, each element entering
    the sorted list only when strictly before its last entry (ties keep the lower index).
    With a `budget` of insertion steps, stops once it is spent and returns the i1 "over
    budget" (best[] is then to be recomputed); else returns None."""
    count = entry_alloca(b, I64, "count")
    pos = entry_alloca(b, I64, "pos")
    enters = entry_alloca(b, I1, "enters")
    steps = entry_alloca(b, I64, "steps")
    b.store(const_i64(0), count)
    b.store(const_i64(0), steps)
    if k == 0:
        return None
    limit = const_i64(budget if budget is not None else 2**62)
    elem = entry_alloca(b, I64, "elem")
    b.store(const_i64(0), elem)
    with _while(b, lambda: b.and_(b.icmp_signed("<", b.load(elem), const_i64(n)),
                                  b.icmp_signed("<=", b.load(steps), limit)), "elem"):
        i = b.load(elem)
        b.store(b.add(i, const_i64(1)), elem)
        filling = b.icmp_signed("<", b.load(count), const_i64(k))
        with b.if_else(filling) as (fill, full):
            with fill:
                c = b.load(count)
                b.store(c, pos)
                b.store(b.add(c, const_i64(1)), count)
                b.store(ir.Constant(I1, 1), enters)
            with full:
                last = b.load(b.gep(best, [const_i64(k - 1)]))
                b.store(const_i64(k - 1), pos)
                b.store(sorter.call_less(b, ctx, i, last), enters)
        with b.if_then(b.load(enters)):
            # Binary search over best[0, pos) for the first entry that `i` goes before (the list
            # is sorted under a strict weak order, so "goes before" is false, then true).
            lo, hi = entry_alloca(b, I64, "lo"), entry_alloca(b, I64, "hi")
            b.store(const_i64(0), lo)
            b.store(b.load(pos), hi)
            with _while(b, lambda: b.icmp_signed("<", b.load(lo), b.load(hi)), "search"):
                mid = b.lshr(b.add(b.load(lo), b.load(hi)), const_i64(1))
                before = sorter.call_less(b, ctx, i, b.load(b.gep(best, [mid])))
                b.store(b.select(before, b.load(lo), b.add(mid, const_i64(1))), lo)
                b.store(b.select(before, mid, b.load(hi)), hi)
            target = b.load(lo)
            with for_range(b, const_i64(0), b.sub(b.load(pos), target), "shift") as q:
                at = b.sub(b.load(pos), q)
                b.store(b.load(b.gep(best, [b.sub(at, const_i64(1))])), b.gep(best, [at]))
            b.store(b.trunc(i, I32), b.gep(best, [target]))
            if budget is not None:  # an entering element costs its comparisons and, at 1/8, its moves
                moved = b.lshr(b.sub(b.load(pos), target), const_i64(3))
                b.store(b.add(b.load(steps), b.add(moved, const_i64(max(1, k.bit_length())))), steps)
    return b.icmp_signed(">", b.load(steps), limit) if budget is not None else None
