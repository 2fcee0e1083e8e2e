"""GEMM kernels: a dot, and the elementwise epilogue fused after it, through BLAS called natively.

A dot that is not small (codegen/planning.py `sequential_dot` keeps the small ones as in-order
loop kernels) becomes a custom kernel (KernelPlan.custom = "gemm") with the usual CPU ABI
`void k(i8* in..., i8* out..., i8* scratch..., i64 begin, i64 end)`. Its work units are batch
elements x row panels of the lhs x column panels of the rhs, cut by the shape alone
(codegen/kernels/gemm_partition.py), so the runtime's threads split them deterministically;
each unit calls the GEMM library on its block of the result (codegen/kernels/blas_call.py:
oneDNN's `dnnl_sgemm` for f32 where it is installed, else the Fortran BLAS `?gemm_` of scipy's
OpenBLAS; single-threaded, registered by runtime/jit_builtins.py), then runs the fused epilogue (bias add,
activation, residual, convert ...: element generators of the rest of the fusion, reading the
dot's value from the block) over that block while it is in cache.

Layouts: buffers are row-major. XLA's dimension numbers are mapped onto BLAS's transpose flags
and leading dimensions when each operand's free dimensions and its contracting dimensions
collapse into one strided dimension each, one of them of unit stride (batch dimensions may sit
anywhere: each unit computes its own batch offsets). An operand that does not fit, is not a
plain parameter (a fused producer expression), or has another element type than the GEMM's
(bf16/f16 operands go through sgemm in f32, as XLA:CPU upcasts them) is first packed by a loop
kernel into a temporary in [batch..., free..., contracting...] order for the lhs (batch,
contracting, free for the rhs), converted to the GEMM's type.

Row-major C[rows, N] = A[rows, K] B[K, N] is column-major C^T = B^T A^T, so BLAS gets the
rhs (the unit's columns of it) as its first matrix and the panel of the lhs as its second.
"""
from __future__ import annotations

from llvmlite import ir

from ...emitters.elemental import ElementalEmitter
from ...emitters.ir_helpers import Index, const_i64, delinearize, for_range, load_element, store_element
from ...hlo.dtypes import element_type
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shapes import ArrayShape, array
from ...hlo.walk import first_non_elementwise_use
from ..planning import KernelPlan, plan_fusion, rebuild, sequential_dot
from ..schedule import is_emittable, wrap_instruction
from .args import output_leaves
from .blas_call import GemmCall, blas_operands
from .cpu_gemm_onednn import plan_onednn_matmul
from .gemm_layout import (
    INT32_MAX, DotDims, Matrix, OutputMap, dot_dims, gemm_dtype, operand_matrix, output_chain,
    output_map,
)
from .gemm_partition import GemmPartition, gemm_partition
from .loop_hints import ROLLED_AROUND, ROLLED_INTERLEAVE, forbid_vectorization, interleave, stays_rolled


# ---- which computations become GEMM kernels ----------------------------------------------------

def _epilogue_reaches(comp: HloComputation, dot: HloInstruction) -> bool:
    """Whether every path from `dot` to the root of `comp` runs through elementwise ops of the
    dot's dimensions (so the epilogue reads the dot only at its own output index), possibly
    ending in a root transpose and/or reshape (written through the output map), and the rest of the
    computation has element generators and nothing the epilogue would recompute."""
    dims = tuple(dot.shape.dims)
    if not comp.root.shape.is_array:
        return False
    chain = output_chain(comp)
    value, members = chain.value, set(chain.members)
    if tuple(value.shape.dims) != dims:
        return False
    cone = _operand_cone(dot)
    for inst in comp.instructions:
        if inst is dot or inst in cone or inst.opcode == "parameter":
            continue
        if inst.info.elemental is None or not inst.info.fits_an_epilogue:
            return False
    return first_non_elementwise_use(dot, dims, allowed=members) is None


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
    if min(dd.batch, dd.m, dd.n, dd.k) <= 0 or max(dd.m, dd.n, dd.k) > INT32_MAX:
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


def dot_layout_matrix(dot: HloInstruction) -> Matrix:
    """The dot's result in its own row-major layout as C matrices [batch][M][N]."""
    dd = dot_dims(dot)
    nb, nm, n = len(dd.lb), len(dd.lf), dot.shape.rank
    m = operand_matrix(dot.shape, list(range(nb)), list(range(nb, nb + nm)), list(range(nb + nm, n)))
    assert m is not None  # a row-major [B][M][N] always collapses
    return m


def gemm_needs_scratch(comp: HloComputation, dot: HloInstruction) -> bool:
    """Whether the GEMM of `comp` writes its result into a scratch temporary (in the dot's own
    layout) rather than the output: the output's type is not the GEMM's, or its layout (a root
    transpose) is not one BLAS can write through a leading dimension."""
    return output_leaves(comp)[0].shape.dtype.name != gemm_dtype(dot) or output_map(comp, dot).matrix() is None


def emit_gemm_kernel(skel, kernel) -> None:
    """Fill CPU kernel skeleton `skel` with the GEMM kernel `kernel` (a KernelPlan whose
    computation holds one dot of parameters and its elementwise epilogue, perhaps under a root
    transpose; scratch 0, when present, holds the GEMM's result where the output cannot: see
    gemm_needs_scratch)."""
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
    lhs = skel._typed(skel.function.args[_arg_of(skel, dot.operands[0])], et)
    rhs = skel._typed(skel.function.args[_arg_of(skel, dot.operands[1])], et)
    omap = output_map(comp, dot)
    cm = dot_layout_matrix(dot) if kernel.scratch else omap.matrix()
    if cm is None:
        raise ValueError(f"GEMM kernel {kernel.name}: BLAS cannot write {comp.root.name}'s layout and no scratch")
    epilogue = _runs_epilogue(comp, dot, bool(kernel.scratch))
    c_base = skel.scratch_ptr(0, et) if kernel.scratch else skel.output_ptr(0)

    swapped, (trans1, ld1), (trans2, ld2), ldc = blas_operands(lm, rm, cm)
    part = gemm_partition(dd, et.name)
    call = GemmCall(b, skel.module, et)
    t1, t2 = call.char(trans1), call.char(trans2)
    p_k = call.dim(dd.k)
    p_ld1, p_ld2, p_ldc = call.dim(ld1), call.dim(ld2), call.dim(ldc)
    with for_range(b, skel.begin, skel.end, "unit") as unit:
        bi, (m0, rows), (n0, cols) = _unit_block(b, unit, part)
        # The unit's rows start m0 rows into the lhs and C, its columns n0 columns into the
        # rhs and C, each at that matrix's own stride (a transposed operand or a transposed
        # output only changes which stride that is; BLAS's flags and leading dimensions do not
        # change with the block).
        a_ptr = b.gep(lhs, [b.add(_batch_offset(b, bi, lm), b.mul(m0, const_i64(lm.row_stride)))], inbounds=True)
        b_ptr = b.gep(rhs, [b.add(_batch_offset(b, bi, rm), b.mul(n0, const_i64(rm.col_stride)))], inbounds=True)
        c_off = b.add(b.mul(m0, const_i64(cm.row_stride)), b.mul(n0, const_i64(cm.col_stride)))
        c_ptr = b.gep(c_base, [b.add(_batch_offset(b, bi, cm), c_off)], inbounds=True)
        p_rows, p_cols = call.dim(rows), call.dim(cols)
        first, second = (a_ptr, b_ptr) if swapped else (b_ptr, a_ptr)
        sizes = (p_rows, p_cols) if swapped else (p_cols, p_rows)
        call.call((t1, t2), (*sizes, p_k), (first, p_ld1), (second, p_ld2), (c_ptr, p_ldc))
        if epilogue:
            _emit_epilogue(skel, comp, dot, (c_base, cm), omap, et, bi, (m0, rows), (n0, cols), dd,
                           in_place=not kernel.scratch, panel_cols=part.cols)
    call.finish()
    skel.finish()


def _runs_epilogue(comp: HloComputation, dot: HloInstruction, scratch: bool) -> bool:
    """Whether the GEMM kernel of `comp` runs an epilogue loop over its block after the GEMM
    call: the output is not the dot's value itself (an elementwise epilogue), has another type
    than the GEMM's, or is written from a scratch temporary (`scratch`: gemm_needs_scratch)."""
    direct = output_chain(comp).value is dot
    return not direct or output_leaves(comp)[0].shape.dtype != element_type(gemm_dtype(dot)) or scratch


def epilogue_elements(kernel) -> int:
    """Elements the epilogue loop of GEMM kernel `kernel` (a KernelPlan, custom="gemm") computes
    per call, all work units together: the dot's result's when it runs one (`_runs_epilogue`),
    else 0 (the kernel is its GEMM calls and their bookkeeping). What the kernel's own code costs
    beyond the library's multiply-adds (codegen/kernel_work.py)."""
    dot = find_gemm_dot(kernel.comp)
    if dot is None:
        raise ValueError(f"GEMM kernel {kernel.name}: computation {kernel.comp.name} has no GEMM-able dot")
    return dot.shape.element_count() if _runs_epilogue(kernel.comp, dot, bool(kernel.scratch)) else 0


def _unit_block(b: ir.IRBuilder, unit: ir.Value, part: GemmPartition):
    """(batch element, (first row, rows), (first column, columns)) of work unit `unit` of
    partition `part`: units run batch element, then row panel, then column panel; the last
    panel of each kind holds what is left."""
    def split(index: ir.Value, size: int, extent: int) -> tuple[ir.Value, ir.Value]:
        start = b.mul(index, const_i64(size))
        left = b.sub(const_i64(extent), start)
        return start, b.select(b.icmp_signed("<", left, const_i64(size)), left, const_i64(size))

    cp = b.urem(unit, const_i64(part.col_panels)) if part.col_panels > 1 else const_i64(0)
    block = b.udiv(unit, const_i64(part.col_panels)) if part.col_panels > 1 else unit
    rp = b.urem(block, const_i64(part.row_panels)) if part.row_panels > 1 else const_i64(0)
    bi = b.udiv(block, const_i64(part.row_panels)) if part.row_panels > 1 else block
    return bi, split(rp, part.rows, part.m), split(cp, part.cols, part.n)


def _arg_of(skel, param: HloInstruction) -> int:
    """The kernel argument index of array parameter `param`."""
    return skel._param_slots[param.parameter_number][0][0]


def _epilogue_comp(comp: HloComputation, dot: HloInstruction, et, value: HloInstruction) -> HloComputation:
    """The computation of `value` (comp's root, or the operand of its root transpose) with
    `dot` read from a parameter of the GEMM's element type `et`, numbered after comp's
    parameters, and converted to the dot's own type when that differs (a bf16 dot is computed
    in f32 and rounded once, as XLA:CPU's upcast dot is)."""
    new = HloComputation(f"{comp.name}.epilogue")
    mapping: dict[HloInstruction, HloInstruction] = {}
    for p in comp.parameters:
        q = p.clone()
        q.parameter_number = p.parameter_number
        mapping[p] = new.add_instruction(q)
    q = HloInstruction("parameter", dot.shape.with_dtype(et), name="gemm_result")
    q.parameter_number = len(comp.parameters)
    result = new.add_instruction(q)
    if et != dot.shape.dtype:
        result = new.add_instruction(HloInstruction("convert", dot.shape, [result], name="gemm_result.convert"))
    mapping[dot] = result
    for inst in _cone_to(value, stop=dot):
        if inst not in mapping:
            mapping[inst] = new.add_instruction(inst.clone(operands=[mapping[o] for o in inst.operands]))
    new.root = mapping[value]
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


def _group_offset(b: ir.IRBuilder, index: ir.Value, dims: tuple[int, ...], strides: tuple[int, ...]) -> ir.Value:
    """Element offset of row-major `index` over `dims` placed at `strides`."""
    if not dims:
        return const_i64(0)
    if len([d for d in dims if d != 1]) <= 1:  # one real dimension: no division needed
        stride = next((s for d, s in zip(dims, strides) if d != 1), 0)
        return b.mul(index, const_i64(stride))
    offset = const_i64(0)
    for idx, stride in zip(delinearize(b, index, dims), strides):
        offset = b.add(offset, b.mul(idx, const_i64(stride)))
    return offset


# An epilogue's column loop longer than this is the loop LLVM vectorizes; its row loop is kept
# from the vectorizer (`_emit_epilogue`). One thread, CPU time, [16384,256] x [256,N] + bias +
# relu with the hint against without (load 8.1-8.5): N = 32 0.82x, 10 0.90x, 4 and 2 1.00x,
# 1 1.06x (a single column: the rows are the only vectors).
SHORT_EPILOGUE_ROW = 4


def _emit_epilogue(skel, comp: HloComputation, dot: HloInstruction, c: tuple[ir.Value, Matrix], omap: OutputMap,
                   et, bi: ir.Value, row_range: tuple[ir.Value, ir.Value], col_range: tuple[ir.Value, ir.Value],
                   dd: DotDims, in_place: bool, panel_cols: int) -> None:
    """Write output leaf 0 for the block of rows [m0, m0 + rows) and columns [n0, n0 + cols)
    (`row_range` = (m0, rows), `col_range` = (n0, cols)) of batch element `bi` of the dot's
    [B][M][N] result: the epilogue's element generators at the dot's index, reading the dot's
    value from the GEMM's C matrices `c`, storing through output map `omap` (the dot's own
    layout, or a root transpose's). `in_place`: `c` is the output itself, in its layout (no
    scratch), so each element is read and then written at one address. `panel_cols`: the
    columns of a full column panel (the column loop's length but in the last panel)."""
    b = skel.builder
    c_base, cm = c
    epi = _epilogue_comp(comp, dot, et, output_chain(comp).value)
    dot_number = len(comp.parameters)
    c_elem: list[ir.Value] = []  # the address of the current (row, column)'s C element

    def dot_gen(index: Index):
        return load_element(b, c_elem[-1], et)

    def param_gen(p: HloInstruction):
        return dot_gen if p.parameter_number == dot_number else skel.param_gen(p)

    root = ElementalEmitter(b, skel.target, param_gen).gen(epi.root)
    out_dtype = output_leaves(comp)[0].shape.dtype
    dims = tuple(dot.shape.dims)
    batch, rows, cols = omap.groups()
    out = skel.output_ptr(0)
    n = dd.n
    sizes = tuple(omap.dims[d] for d in batch), tuple(omap.dims[d] for d in rows), tuple(omap.dims[d] for d in cols)
    strides = (tuple(omap.strides[d] for d in batch), tuple(omap.strides[d] for d in rows),
               tuple(omap.strides[d] for d in cols))
    # Rows mode (multi-index from the row) when the rhs's only free dimension is the last.
    rows_mode = len(dd.rf) == 1 and len(dims) >= 1 and dims[-1] == n
    c_batch = _batch_offset(b, bi, cm)
    o_batch = _group_offset(b, bi, sizes[0], strides[0])
    (m0, m_count), (n0, n_count) = row_range, col_range
    # Every index below is the element's own (row r, column j) of the whole result, so the
    # block's place needs no offset of its own: only the loops' bounds are the block's.
    # Around a long column loop the row loop stays rolled: unrolled, every row repeated the
    # whole vectorised column loop in one straight-line block (haiku's ResNet-18 step: a 16 x
    # 512 divide, 2,072 instructions after O3, 219 ms of LLVM) for no speed, each element being
    # loaded, computed and stored once whatever the loop structure.
    with for_range(b, m0, b.add(m0, m_count), "erow", unroll=panel_cols < ROLLED_AROUND) as r:
        row = b.add(b.mul(bi, const_i64(dd.m)), r)  # row of the dot's [B*M] x N
        outer = delinearize(b, row, dims[:-1]) if rows_mode else None
        base = b.mul(row, const_i64(n))
        c_row = b.add(c_batch, b.mul(r, const_i64(cm.row_stride)))
        o_row = b.add(o_batch, _group_offset(b, r, sizes[1], strides[1]))
        # A long column loop stays rolled too (loop_hints.stays_rolled: LLVM fully unrolled it).
        with for_range(b, n0, b.add(n0, n_count), "ecol", unroll=not stays_rolled(panel_cols)) as j:
            lin = b.add(base, j)
            c_elem.append(b.gep(c_base, [b.add(c_row, b.mul(j, const_i64(cm.col_stride)))], inbounds=True))
            index = Index(b, dims, multi=list(outer) + [j], linear=lin) if rows_mode else Index(b, dims, linear=lin)
            if in_place:
                # Stored through the very pointer it was loaded from: LLVM then sees one address
                # read and written per iteration and vectorizes the loop. Computed through the
                # output map instead, the two addresses look unrelated, and the vectorizer's
                # run-time overlap check (distance 0: "overlaps") sent every row down the scalar
                # loop (a GELU epilogue took 12 ms on [1024, 2048] instead of under 1).
                dest = c_elem[-1]
            else:
                o_lin = lin if omap.is_identity else b.add(o_row, _group_offset(b, j, sizes[2], strides[2]))
                dest = b.gep(out, [o_lin], inbounds=True)
            store_element(b, root(index), dest, out_dtype)
            c_elem.pop()
        if stays_rolled(panel_cols):
            interleave(j, ROLLED_INTERLEAVE)
    # The column loop is the one to vectorize (unit stride in place); a short constant one
    # (10-48 columns) LLVM unrolled fully and then vectorized the row loop with gathers and
    # scatters (docs/dots.md, tests/codegen/test_gemm_epilogue.py).
    if panel_cols > SHORT_EPILOGUE_ROW:
        forbid_vectorization(r)


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
    if gemm_needs_scratch(gcomp, gdot):
        # The output cannot hold the GEMM's values (a narrower type, a layout BLAS cannot
        # write): a temporary does, and the epilogue writes the output from it.
        scratch.append(("tmp", len(temps)))
        temps.append(array(gemm_dtype(gdot), (dd.batch * dd.m * dd.n,)))
    part = gemm_partition(dd, gemm_dtype(gdot))
    kernels.append(KernelPlan(gcomp, [0], part.units, part.unit_elements, None, inputs=inputs, results=[("out", 0)],
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
    if not is_gemm_computation(comp):
        return None
    # batched f32 dots of the class the rule names: one oneDNN matmul primitive call
    return plan_onednn_matmul(comp, name) or plan_gemm(comp, name)
