"""GEMM kernels: a dot, and the elementwise epilogue fused after it, through BLAS called natively.

A dot that is not small (codegen/planning.py `sequential_dot` keeps the small ones as in-order
loop kernels) becomes a custom kernel (KernelPlan.custom = "gemm") with the usual CPU ABI
`void k(i8* in..., i8* out..., i8* scratch..., i64 begin, i64 end)`. Its work units are batch
elements x row panels of the lhs, so the runtime's threads split them deterministically; each
unit calls the Fortran BLAS `?gemm_` of scipy's OpenBLAS (single-threaded, registered by
runtime/jit_builtins.py) on its panel, then runs the fused epilogue (bias add, activation,
residual, convert ...: element generators of the rest of the fusion, reading the dot's value
from the panel) over that panel while it is in cache.

Layouts: buffers are row-major. XLA's dimension numbers are mapped onto BLAS's transpose flags
and leading dimensions when each operand's free dimensions and its contracting dimensions
collapse into one strided dimension each, one of them of unit stride (batch dimensions may sit
anywhere: each unit computes its own batch offsets). An operand that does not fit, is not a
plain parameter (a fused producer expression), or has another element type than the GEMM's
(bf16/f16 operands go through sgemm in f32, as XLA:CPU upcasts them) is first packed by a loop
kernel into a temporary in [batch..., free..., contracting...] order for the lhs (batch,
contracting, free for the rhs), converted to the GEMM's type.

Row-major C[rows, N] = A[rows, K] B[K, N] is column-major C^T = B^T A^T, so BLAS gets the
rhs as its first matrix and the panel of the lhs as its second.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter, mem_type
from ...emitters.ir_helpers import I64, Index, const_i64, delinearize, for_range, load_element, store_element
from ...hlo.dtypes import element_type
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import ArrayShape, array
from ...runtime.jit_builtins import blas_symbol
from ..planning import KernelPlan, plan_fusion, rebuild, sequential_dot
from ..schedule import is_emittable, wrap_instruction
from .args import output_leaves

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)

# The BLAS routine per GEMM element type; other float types compute in the first they widen to.
GEMM_ROUTINE = {"f32": "sgemm", "f64": "dgemm", "c64": "cgemm", "c128": "zgemm"}
_INT32_MAX = (1 << 31) - 1

# Rows of the lhs per work unit. A unit's BLAS call packs the whole rhs again, which costs
# K*N copies against 2*rows*K*N flops, so panels stay at least MIN_PANEL_ROWS high; a single
# matrix is cut into at most MAX_PANELS panels (enough for the cores to share it), and batched
# dots with several batch elements take whole matrices per unit.
MIN_PANEL_ROWS = 64
MAX_PANELS = 8
WHOLE_MATRIX_BATCH = 4

# Ops of an epilogue whose element generator must not run per output element of the GEMM
# (they would recompute a reduction per element); such fusions stay calls.
_NOT_IN_EPILOGUE = frozenset({"reduce", "reduce-window", "dot", "convolution", "scatter", "sort"})


def _dims(inst: HloInstruction, key: str) -> list[int]:
    return [int(d) for d in inst.attrs.get(key, ())]


def gemm_dtype(dot: HloInstruction) -> str | None:
    """The element type the BLAS call computes `dot` in, or None when it has no BLAS routine
    (integer or predicate dots, f8 types)."""
    types = [dot.shape.dtype] + [op.shape.dtype for op in dot.operands]
    if any(not (t.is_float or t.is_complex) for t in types):
        return None
    if any(not t.is_complex and t.name not in ("f16", "bf16", "f32", "f64") for t in types):
        return None
    wide = any(t.name in ("f64", "c128") for t in types)
    if any(t.is_complex for t in types):
        return "c128" if wide else "c64"
    return "f64" if wide else "f32"


@dataclass(frozen=True)
class Matrix:
    """One operand of a GEMM seen as matrices [batch][rows][cols] in a row-major buffer:
    element (b, r, c) of the dot's order (rows = free dims for the lhs, contracting for the
    rhs) at `batch_offset(b) + r * row_stride + c * col_stride` elements."""

    batch_sizes: tuple[int, ...]
    batch_strides: tuple[int, ...]
    rows: int
    cols: int
    row_stride: int
    col_stride: int


def _collapse(dims: tuple[int, ...], strides: list[int], group: list[int]) -> tuple[int, int | None] | None:
    """(size, stride) of dimensions `group` (in that order) of a row-major array collapsed into
    one, stride None when the size is 1; None when they do not collapse."""
    kept = [d for d in group if dims[d] != 1]
    size = math.prod(dims[d] for d in group)
    if not kept or size == 0:
        return size, None
    for outer, inner in zip(kept, kept[1:]):
        if strides[outer] != strides[inner] * dims[inner]:
            return None
    return size, strides[kept[-1]]


def operand_matrix(shape: ArrayShape, batch: list[int], rows: list[int], cols: list[int]) -> Matrix | None:
    """The operand of `shape` as BLAS matrices (batch dims `batch`, row dims `rows`, column
    dims `cols`, each in the dot's order), or None when BLAS cannot read it in place (one of
    the row or column groups must have unit stride, the other a stride past the first's extent)."""
    dims = tuple(shape.dims)
    strides = [1] * len(dims)
    for d in range(len(dims) - 2, -1, -1):
        strides[d] = strides[d + 1] * dims[d + 1]
    r, c = _collapse(dims, strides, rows), _collapse(dims, strides, cols)
    if r is None or c is None:
        return None
    (nr, sr), (nc, sc) = r, c
    if sc in (None, 1) and (sr is None or sr >= max(nc, 1)):
        sc, sr = 1, sr if sr is not None else max(nc, 1)
    elif sr in (None, 1) and (sc is None or sc >= max(nr, 1)):
        sr, sc = 1, sc if sc is not None else max(nr, 1)
    else:
        return None
    if max(sr, sc, nr, nc) > _INT32_MAX:
        return None
    return Matrix(tuple(dims[d] for d in batch), tuple(strides[d] for d in batch), nr, nc, sr, sc)


@dataclass(frozen=True)
class DotDims:
    """A dot's dimension numbers with the free dimensions, and its GEMM sizes."""

    lb: list[int]
    lc: list[int]
    lf: list[int]
    rb: list[int]
    rc: list[int]
    rf: list[int]
    batch: int
    m: int
    n: int
    k: int


def dot_dims(dot: HloInstruction) -> DotDims:
    """The dimension numbers and GEMM sizes (batch, M, N, K) of `dot`."""
    lhs, rhs = (op.shape.dims for op in dot.operands)
    lb, lc = _dims(dot, "lhs_batch_dims"), _dims(dot, "lhs_contracting_dims")
    rb, rc = _dims(dot, "rhs_batch_dims"), _dims(dot, "rhs_contracting_dims")
    lf = [d for d in range(len(lhs)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rhs)) if d not in rb and d not in rc]
    return DotDims(lb, lc, lf, rb, rc, rf, math.prod(lhs[d] for d in lb), math.prod(lhs[d] for d in lf),
                   math.prod(rhs[d] for d in rf), math.prod(lhs[d] for d in lc))


def panel_rows(dd: DotDims) -> int:
    """Rows of the lhs per work unit (see MIN_PANEL_ROWS)."""
    if dd.batch >= WHOLE_MATRIX_BATCH or dd.m <= MIN_PANEL_ROWS:
        return max(dd.m, 1)
    return max(MIN_PANEL_ROWS, -(-dd.m // MAX_PANELS))


# ---- which computations become GEMM kernels ----------------------------------------------------

def _epilogue_reaches(comp: HloComputation, dot: HloInstruction) -> bool:
    """Whether every path from `dot` to the root of `comp` runs through elementwise ops of the
    dot's dimensions (so the epilogue reads the dot only at its own output index), and the
    rest of the computation has element generators and nothing the epilogue would recompute."""
    if not comp.root.shape.is_array or tuple(comp.root.shape.dims) != tuple(dot.shape.dims):
        return False
    cone = _operand_cone(dot)
    for inst in comp.instructions:
        if inst is dot or inst in cone or inst.opcode == "parameter":
            continue
        if inst.info.elemental is None or inst.opcode in _NOT_IN_EPILOGUE:
            return False
    stack, seen = [dot], set()
    while stack:
        inst = stack.pop()
        for user in inst.users:
            if user in seen or user.parent is not comp:
                continue
            if not user.info.elementwise or tuple(user.shape.dims) != tuple(dot.shape.dims):
                return False
            seen.add(user)
            stack.append(user)
    return True


def _operand_cone(dot: HloInstruction) -> set[HloInstruction]:
    """The instructions the dot's operands are computed from (packing kernels compute them)."""
    found, stack = set(), list(dot.operands)
    while stack:
        inst = stack.pop()
        if inst in found:
            continue
        found.add(inst)
        stack.extend(inst.operands)
    return found


def find_gemm_dot(comp: HloComputation) -> HloInstruction | None:
    """The dot a GEMM kernel would compute for fused computation `comp`: its only dot, with a
    BLAS element type, no zero or over-int32 sizes, reaching the root through an elementwise
    epilogue only; None when `comp` is not such a computation."""
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    if len(dots) != 1:
        return None
    dot = dots[0]
    if gemm_dtype(dot) is None or "sparsity" in dot.attrs or dot in _operand_cone(dot):
        return None
    dd = dot_dims(dot)
    if min(dd.batch, dd.m, dd.n, dd.k) <= 0 or max(dd.m, dd.n, dd.k) > _INT32_MAX:
        return None
    if len(dd.lb) != len(dd.rb) or len(dd.lc) != len(dd.rc):
        return None
    lhs, rhs = (op.shape.dims for op in dot.operands)
    if any(lhs[d] != rhs[e] for d, e in zip(dd.lb + dd.lc, dd.rb + dd.rc)):
        return None
    return dot if _epilogue_reaches(comp, dot) else None


def lhs_matrix(dot: HloInstruction) -> Matrix | None:
    """The lhs of `dot` as [batch][M][K] matrices, or None (needs packing)."""
    dd = dot_dims(dot)
    return operand_matrix(dot.operands[0].shape, dd.lb, dd.lf, dd.lc)


def rhs_matrix(dot: HloInstruction) -> Matrix | None:
    """The rhs of `dot` as [batch][K][N] matrices, or None (needs packing)."""
    dd = dot_dims(dot)
    return operand_matrix(dot.operands[1].shape, dd.rb, dd.rc, dd.rf)


def needs_packing(dot: HloInstruction, side: int) -> bool:
    """Whether operand `side` of `dot` must be packed before BLAS reads it."""
    op = dot.operands[side]
    if op.opcode != "parameter" or not op.shape.is_array or op.shape.dtype.name != gemm_dtype(dot):
        return True
    return (lhs_matrix(dot) if side == 0 else rhs_matrix(dot)) is None


def packed_order(dot: HloInstruction, side: int) -> list[int]:
    """The dimension order operand `side` is packed in: lhs batch, free, contracting; rhs
    batch, contracting, free."""
    dd = dot_dims(dot)
    return dd.lb + dd.lf + dd.lc if side == 0 else dd.rb + dd.rc + dd.rf


# ---- the emitter -------------------------------------------------------------------------------

def _batch_offset(b: ir.IRBuilder, batch: ir.Value, m: Matrix) -> ir.Value:
    """Element offset of batch element `batch` (linear over m.batch_sizes) in operand `m`."""
    if not m.batch_sizes:
        return const_i64(0)
    offset = const_i64(0)
    for idx, stride in zip(delinearize(b, batch, m.batch_sizes), m.batch_strides):
        offset = b.add(offset, b.mul(idx, const_i64(stride)))
    return offset


def _gemm_function(module: ir.Module, routine: str) -> ir.Function:
    """The declaration of BLAS routine `routine` (Fortran ABI: 13 pointers) in `module`."""
    name = blas_symbol(routine)
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I8P] * 13), name)
    fn.attributes.add("nounwind")
    return fn


def emit_gemm_kernel(skel, kernel) -> None:
    """Fill CPU kernel skeleton `skel` with the GEMM kernel `kernel` (a KernelPlan whose
    computation holds one dot of parameters and its elementwise epilogue; scratch 0, when
    present, holds the GEMM's result where the output cannot: see plan_gemm)."""
    comp = kernel.comp
    dot = find_gemm_dot(comp)
    if dot is None:
        raise ValueError(f"GEMM kernel {kernel.name}: computation {comp.name} has no GEMM-able dot")
    b = skel.builder
    dd = dot_dims(dot)
    et = element_type(gemm_dtype(dot))
    lm, rm = lhs_matrix(dot), rhs_matrix(dot)
    if lm is None or rm is None or any(op.opcode != "parameter" for op in dot.operands):
        raise ValueError(f"GEMM kernel {kernel.name}: dot {dot.name} reads an operand BLAS cannot")
    elem = mem_type(et)
    lhs = skel._typed(skel.function.args[_arg_of(skel, dot.operands[0])], et)
    rhs = skel._typed(skel.function.args[_arg_of(skel, dot.operands[1])], et)
    out_et = output_leaves(comp)[0].shape.dtype
    epilogue = comp.root is not dot or out_et != et
    c_base = skel.scratch_ptr(0, et) if kernel.scratch else skel.output_ptr(0)

    def slot(ty, value):
        with b.goto_entry_block():
            p = b.alloca(ty)
        b.store(value, p)
        return b.bitcast(p, I8P)

    def i32(v):
        return slot(I32, v if isinstance(v, ir.Value) else ir.Constant(I32, int(v)))

    def scalar(x: float) -> ir.Constant:
        if et.is_complex:
            return ir.Constant(elem, [ir.Constant(elem.elements[0], x), ir.Constant(elem.elements[1], 0.0)])
        return ir.Constant(elem, x)

    # Column-major: C^T (N x rows) = op(rhs as N x K) * op(lhs panel as K x rows).
    transa, lda = (ord("N"), rm.row_stride) if rm.col_stride == 1 else (ord("T"), rm.col_stride)
    transb, ldb = (ord("N"), lm.row_stride) if lm.col_stride == 1 else (ord("T"), lm.col_stride)
    rows = panel_rows(dd)
    panels = -(-dd.m // rows)
    gemm = _gemm_function(skel.module, GEMM_ROUTINE[et.name])
    ta, tb = slot(ir.IntType(8), ir.Constant(ir.IntType(8), transa)), slot(ir.IntType(8), ir.Constant(ir.IntType(8), transb))
    p_n, p_k = i32(dd.n), i32(dd.k)
    p_lda, p_ldb, p_ldc = i32(lda), i32(ldb), i32(dd.n)
    p_alpha, p_beta = slot(elem, scalar(1.0)), slot(elem, scalar(0.0))
    with for_range(b, skel.begin, skel.end, "unit") as unit:
        bi = b.udiv(unit, const_i64(panels))
        m0 = b.mul(b.urem(unit, const_i64(panels)), const_i64(rows))
        left = b.sub(const_i64(dd.m), m0)
        count = b.select(b.icmp_signed("<", left, const_i64(rows)), left, const_i64(rows))
        a_off = b.add(_batch_offset(b, bi, lm), b.mul(m0, const_i64(lm.row_stride)))
        c_row = b.add(b.mul(bi, const_i64(dd.m)), m0)  # first row of the panel in [B*M]
        c_ptr = b.gep(c_base, [b.mul(c_row, const_i64(dd.n))], inbounds=True)
        args = [ta, tb, p_n, i32(b.trunc(count, I32)), p_k, p_alpha,
                b.bitcast(b.gep(rhs, [_batch_offset(b, bi, rm)], inbounds=True), I8P), p_lda,
                b.bitcast(b.gep(lhs, [a_off], inbounds=True), I8P), p_ldb, p_beta,
                b.bitcast(c_ptr, I8P), p_ldc]
        b.call(gemm, args)
        if epilogue:
            _emit_epilogue(skel, comp, dot, c_base, et, c_row, b.add(c_row, count), dd)
    skel.finish()


def _arg_of(skel, param: HloInstruction) -> int:
    """The kernel argument index of array parameter `param`."""
    return skel._param_slots[param.parameter_number][0][0]


def _epilogue_comp(comp: HloComputation, dot: HloInstruction, et) -> HloComputation:
    """`comp` with `dot` read from a parameter of the GEMM's element type `et`, numbered after
    comp's parameters, and converted to the dot's own type when that differs (a bf16 dot is
    computed in f32 and rounded once, as XLA:CPU's upcast dot is)."""
    new = HloComputation(f"{comp.name}.epilogue")
    mapping: dict[HloInstruction, HloInstruction] = {}
    for p in comp.parameters:
        q = p.clone()
        q.parameter_number = p.parameter_number
        mapping[p] = new.add_instruction(q)
    q = HloInstruction("parameter", dot.shape.with_dtype(et), name="gemm_result")
    q.parameter_number = len(comp.parameters)
    value = new.add_instruction(q)
    if et != dot.shape.dtype:
        value = new.add_instruction(HloInstruction("convert", dot.shape, [value], name="gemm_result.convert"))
    mapping[dot] = value
    for inst in _cone_to(comp.root, stop=dot):
        if inst not in mapping:
            mapping[inst] = new.add_instruction(inst.clone(operands=[mapping[o] for o in inst.operands]))
    new.root = mapping[comp.root]
    return new


def _cone_to(root: HloInstruction, stop: HloInstruction) -> list[HloInstruction]:
    """The instructions `root` is computed from, operands first, not looking past `stop`."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        inst, done = stack.pop()
        if done:
            order.append(inst)
            continue
        if inst in seen:
            continue
        seen.add(inst)
        stack.append((inst, True))
        if inst is not stop:
            stack.extend((o, False) for o in reversed(inst.operands) if o not in seen)
    return order


def _emit_epilogue(skel, comp: HloComputation, dot: HloInstruction, c_base: ir.Value, et,
                   row_begin: ir.Value, row_end: ir.Value, dd: DotDims) -> None:
    """Write output leaf 0 over rows [row_begin, row_end) of [B*M] x N: the epilogue's
    element generators, reading the dot's value from the GEMM result `c_base` (in place when
    that is the output: each element is read before it is written, at the same index)."""
    b = skel.builder
    epi = _epilogue_comp(comp, dot, et)
    dot_number = len(comp.parameters)

    def dot_gen(index: Index):
        return load_element(b, b.gep(c_base, [index.linear], inbounds=True), et)

    def param_gen(p: HloInstruction):
        return dot_gen if p.parameter_number == dot_number else skel.param_gen(p)

    root = ElementalEmitter(b, skel.target, param_gen).gen(epi.root)
    leaf = output_leaves(epi)[0]
    dims = tuple(leaf.shape.dims)
    out = skel.output_ptr(0)
    n = dd.n
    # Rows mode (multi-index from the row) when the rhs's only free dimension is the last.
    rows_mode = len(dd.rf) == 1 and len(dims) >= 1 and dims[-1] == n
    with for_range(b, row_begin, row_end, "erow") as r:
        outer = delinearize(b, r, dims[:-1]) if rows_mode else None
        base = b.mul(r, const_i64(n))
        with for_range(b, const_i64(0), const_i64(n), "ecol") as j:
            lin = b.add(base, j)
            index = Index(b, dims, multi=list(outer) + [j], linear=lin) if rows_mode else Index(b, dims, linear=lin)
            store_element(b, leaf.select(root(index)), b.gep(out, [lin], inbounds=True), leaf.shape.dtype)


# ---- planning ---------------------------------------------------------------------------------

def is_gemm_computation(comp: HloComputation) -> bool:
    """Whether fused computation `comp` can run as a GEMM kernel (with packing kernels)."""
    return find_gemm_dot(comp) is not None


def _packed_comp(comp: HloComputation, dot: HloInstruction, side: int, name: str) -> HloComputation:
    """A computation of `comp`'s parameters computing operand `side` of `dot` transposed into
    `packed_order` and converted to the GEMM's type."""
    op = dot.operands[side]
    sub = rebuild(comp, op, [], name)
    order = packed_order(dot, side)
    x = sub.root
    t = sub.add_instruction(HloInstruction("transpose", array(op.shape.dtype, [op.shape.dims[d] for d in order]),
                                           [x], {"dimensions": tuple(order)}, name="pack"))
    gt = element_type(gemm_dtype(dot))
    if t.shape.dtype != gt:
        t = sub.add_instruction(HloInstruction("convert", array(gt, t.shape.dims), [t], name="pack.convert"))
    sub.root = t
    return sub


def _gemm_comp(comp: HloComputation, dot: HloInstruction, packed: dict[int, ArrayShape], name: str) -> HloComputation:
    """`comp` with each packed operand of `dot` read from a new parameter (numbered after
    `comp`'s, in side order) and the dot's dimension numbers changed to the packed order; only
    the dot and its epilogue are kept (the operands' producers run in the packing kernels)."""
    new = HloComputation(name)
    mapping: dict[HloInstruction, HloInstruction] = {}
    for p in comp.parameters:
        q = p.clone()
        q.parameter_number = p.parameter_number
        mapping[p] = new.add_instruction(q)
    sides: dict[int, HloInstruction] = {}
    for j, side in enumerate(sorted(packed)):
        q = HloInstruction("parameter", packed[side], name=f"packed_{'lhs' if side == 0 else 'rhs'}")
        q.parameter_number = len(comp.parameters) + j
        sides[side] = new.add_instruction(q)
    dd = dot_dims(dot)
    attrs = dict(dot.attrs)
    nb, nlc = len(dd.lb), len(dd.lc)
    if 0 in packed:
        attrs["lhs_batch_dims"] = tuple(range(nb))
        attrs["lhs_contracting_dims"] = tuple(range(nb + len(dd.lf), nb + len(dd.lf) + nlc))
    if 1 in packed:
        attrs["rhs_batch_dims"] = tuple(range(nb))
        attrs["rhs_contracting_dims"] = tuple(range(nb, nb + nlc))
    needed, stack = set(), [comp.root]
    while stack:  # the dot and its epilogue; a packed operand's producers are left out
        inst = stack.pop()
        if inst in needed:
            continue
        needed.add(inst)
        stack.extend(o for s, o in enumerate(inst.operands) if not (inst is dot and s in packed))
    for inst in comp.post_order():
        if inst in mapping or inst not in needed:
            continue
        ops = [sides[s] if inst is dot and s in sides else mapping[o] for s, o in enumerate(inst.operands)]
        clone = inst.clone(operands=ops)
        if inst is dot:
            clone.attrs = attrs
        mapping[inst] = new.add_instruction(clone)
    new.root = mapping[comp.root]
    return new


def plan_gemm(comp: HloComputation, name: str):
    """Kernels (packing loop kernels first, then the GEMM kernel) computing fused computation
    `comp`, which `is_gemm_computation`, and the shapes of their temporaries; a KernelPlan list
    and a shape list, as codegen/planning.plan_fusion returns them."""
    dot = find_gemm_dot(comp)
    if dot is None:
        raise ValueError(f"{comp.name} is not a GEMM computation")
    kernels: list = []
    temps: list = []
    packed: dict[int, ArrayShape] = {}
    pack_tmp: dict[int, int] = {}
    for side in (0, 1):
        if not needs_packing(dot, side):
            continue
        sub = _packed_comp(comp, dot, side, f"{comp.name}.pack{side}")
        sub_kernels, sub_temps = plan_fusion(sub, f"{name}_pack{side}")
        shift = len(temps)
        temps.extend(sub_temps)
        pack_tmp[side] = len(temps)
        temps.append(sub.root.shape)
        for k in sub_kernels:
            k.inputs = [(kind, i + shift) if kind == "tmp" else (kind, i) for kind, i in k.inputs]
            k.results = [("tmp", pack_tmp[side]) if kind == "out" else (kind, i + shift) for kind, i in k.results]
            k.scratch = [(kind, i + shift) if kind == "tmp" else (kind, i) for kind, i in k.scratch]
        kernels.extend(sub_kernels)
        packed[side] = sub.root.shape
    gcomp = _gemm_comp(comp, dot, packed, f"{comp.name}.gemm")
    gdot = find_gemm_dot(gcomp)
    dd = dot_dims(gdot)
    inputs = []
    n_in = 0
    for p in comp.parameters:
        count = len(p.shape.leaves()) if p.shape.is_tuple else 1
        inputs.extend(("in", n_in + j) for j in range(count))
        n_in += count
    inputs.extend(("tmp", pack_tmp[s]) for s in sorted(packed))
    scratch = []
    leaf = output_leaves(gcomp)[0]
    if leaf.shape.dtype.name != gemm_dtype(gdot):
        # The output cannot hold the GEMM's values (a narrower type): a temporary does.
        scratch.append(("tmp", len(temps)))
        temps.append(array(gemm_dtype(gdot), (dd.batch * dd.m * dd.n,)))
    rows = panel_rows(dd)
    units = dd.batch * -(-dd.m // rows)
    kernels.append(KernelPlan(gcomp, [0], units, rows * dd.n, None, inputs=inputs, results=[("out", 0)],
                              name=f"{name}_gemm", scratch=scratch, custom="gemm"))
    return kernels, temps


# ---- the planner's entry points ------------------------------------------------------------------

def dot_computation(inst: HloInstruction) -> HloComputation | None:
    """For an unfused dot: a one-instruction computation a GEMM kernel runs, or None (the dot
    keeps its library rule: integer dots, zero sizes, no BLAS type)."""
    if inst.opcode != "dot":
        return None
    comp = wrap_instruction(inst)
    return comp if is_gemm_computation(comp) else None


def _single_dot(comp: HloComputation) -> HloInstruction | None:
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    return dots[0] if len(dots) == 1 else None


def inline_small_dot(comp: HloComputation) -> HloComputation | None:
    """`comp` with its one small dot (codegen/planning.sequential_dot) replaced by the in-order
    reduction that computes it, so the loop and reduction planner runs the whole fusion: its
    producers feed the reduction's element generators, its epilogue is the reduction's epilogue
    (XLA:CPU fuses producers into a matrix-vector dot's small operand the same way); None when
    `comp` has no single small dot or the rest has no element generators."""
    dot = _single_dot(comp)
    if dot is None:
        return None
    seq = sequential_dot(dot)
    if seq is None:
        return None
    new = HloComputation(f"{comp.name}.inlined")
    mapping: dict[HloInstruction, HloInstruction] = {}
    for p in comp.parameters:
        q = p.clone()
        q.parameter_number = p.parameter_number
        mapping[p] = new.add_instruction(q)
    for inst in comp.post_order():
        if inst in mapping:
            continue
        if inst is not dot:
            mapping[inst] = new.add_instruction(inst.clone(operands=[mapping[o] for o in inst.operands]))
            continue
        inner: dict[HloInstruction, HloInstruction] = {p: mapping[dot.operands[p.parameter_number]]
                                                        for p in seq.parameters}
        for s in seq.post_order():
            if s not in inner:
                inner[s] = new.add_instruction(s.clone(operands=[inner[o] for o in s.operands]))
        mapping[inst] = inner[seq.root]
    new.root = mapping[comp.root]
    return new if is_emittable(new) else None


def runs_dot_fusion(comp: HloComputation) -> bool:
    """Whether the CPU planner runs fused computation `comp` (which holds a dot) as kernels:
    a GEMM kernel with its epilogue, or a small dot inlined as a reduction."""
    return _single_dot(comp) is not None and (inline_small_dot(comp) is not None or is_gemm_computation(comp))


def plan_dot(comp: HloComputation, name: str):
    """(kernels, temporaries) computing `comp` when it holds a dot the CPU runs as kernels
    (`runs_dot_fusion`), else None."""
    if _single_dot(comp) is None:
        return None
    inlined = inline_small_dot(comp)
    if inlined is not None:
        return plan_fusion(inlined, name)
    return plan_gemm(comp, name) if is_gemm_computation(comp) else None
