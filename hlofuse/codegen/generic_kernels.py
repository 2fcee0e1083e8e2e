"""Shape-generic elementwise loop kernels: one compiled function per structure, whatever the size.

codegen/cpu.py compiles kernels with the same structural text (codegen/kernel_key.py) once, but
that text holds every shape, so the same elementwise expression over arrays of different sizes
was compiled once per size: the Adam update of every differently-shaped parameter of a training
step, the ReLU or residual add of every activation size. A loop kernel's code depends on its
size only through a few decisions of the loop emitter (kernels/cpu_loop.py: rows, plane or flat
mode, the row length, streaming stores, interleaving), and a kernel that is elementwise over
arrays of one shape in row-major order computes element i of every output from element i of
every input, whatever the dimensions. Such a kernel is therefore emitted from a *representative*
of its computation in which every full-size array is [R0, C] (`representative`): C, the
canonical row length, divides the kernel's element count N (`canonical_row`), and the plan
walks N / C rows of C elements (rows mode; the row is the vectorised loop). The buffers are the
same row-major arrays, so the element order is unchanged. The representative's text no longer
holds N, so every kernel of one structure and row length shares one compiled function, and each
launch takes its own work units (N / C). R0 keeps the one size-dependent decision left, whether
rows are written with streaming stores (cpu_loop.streams_rows, for data beyond L3): 2 for
kernels that do not stream, the least row count that streams for those that do
(`representative_rows`), so a kernel's streaming class is part of its key.

`generic_kernels(kernels, target)` applies this to a program's planned kernels, on the CPU
only (the GPU shares the planner, codegen/planning.py, and keeps its kernels), after planning
(row fusion and shared expressions, codegen/row_fusion.py and shared_expressions.py, have
decided) and before codegen/cpu.py groups the kernels by key (`distinct_kernels`). The kernels'
small-level choice (codegen/kernel_work.small_kernels) reads their computations' sizes, so it is
made before (codegen/cpu._compile_cpu), and then made one per structure (`shared_levels`).

Measured on the 2-core Zen 1 host (znver1, AVX2; docs/compile_time.md, "Shape-generic
elementwise kernels", load 5-8): LLVM CPU seconds of the distinct kernels, one thread, off -> on:
the 50-parameter Adam step of benchmarks/compile_time.py 0.175 -> 0.116 (6 -> 4 kernels), equinox's
MLP step 0.508 -> 0.458 (26 -> 23: its three weight matrices' Adam updates one kernel), haiku's
ResNet-18 step, the MNIST CNN step and MobileNetV2 within noise (the kernels merged there are small
ones); run time 0.995-1.005 of the kernels at their own shapes, every output the same bits.
"""
from __future__ import annotations

from types import SimpleNamespace

from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.shapes import ArrayShape, Layout, TupleShape
from .kernel_key import kernel_text
from .kernels import cpu_row  # (cpu_loop.streams_rows compares with its L3 size)
from .kernels.args import output_leaves
from .kernels.linear_reads import full_array, reads_linear_index
from .kernels.cpu_loop import LoopShape, streams_rows
from .planning import KernelPlan

# Canonical row lengths, longest first: a kernel walks rows of the longest that divides its
# element count (`canonical_row`). A long row leaves cpu_loop.interleave_count room for all its
# vectors (a row of 32 bounds it to 4 vectors of 8 floats on AVX2, 2 of 16 on AVX-512, where 8
# ran math-heavy loops up to 1.3x faster), is one vector loop with a constant trip count (no
# remainder), and 1024 elements are 4-8 KiB a buffer, inside L1; 32 is the loop emitter's shortest
# vectorised row (cpu_loop._MIN_ROW). Measured on the Zen 1 host (benchmarks/generic_kernels_ab.py
# --rows, load 5-7): y + a x, an Adam update and a chain of five math functions over 4 K-256 K
# elements at each row length and at their own shapes: no row length consistently faster or
# slower, within 5% at 4 K and 16 K elements. Rows of 32 alone would merge more (the 50-parameter
# Adam step's five shapes into one kernel: LLVM 0.115 -> 0.042 CPU-s, same run time here) but
# are not measured on AVX-512; rows of 64 ran that step 1.12x slower.
ROW_LENGTHS = (1024, 512, 256, 128, 64, 32)
# Whether `generic_kernels` changes anything; False keeps every kernel at its own shape (for
# A/B measurements of the same program's kernels both ways).
GENERIC_KERNELS = True
# Rows of the representative of a kernel that does not stream: two, so the row number is a loop
# value of the emitted code (delinearize gives a constant 0 for a dimension of one).
PLAIN_ROWS = 2


def canonical_row(n: int) -> int | None:
    """The canonical row length of a kernel of `n` elements: the longest of ROW_LENGTHS that
    divides `n`, or None (no such row: the kernel keeps its own shape)."""
    if n <= 0:
        return None
    for c in ROW_LENGTHS:
        if n % c == 0:
            return c
    return None


def generic_elements(kernel: KernelPlan) -> int | None:
    """The element count N of `kernel` when it may run as a shape-generic kernel, else None.

    Eligible: a loop kernel (no reduction group, no custom emitter) that writes every output
    leaf of its computation, where every instruction is a parameter (an array of the output's
    dimensions, or rank 0), a rank-0 constant, a broadcast of a rank-0 operand to the output's
    dimensions, a rank-0 elementwise op, or an elementwise op of the op registry without a
    called computation whose shape and operands all have the output's dimensions; the root is
    one such output or a tuple of them; every full-size array is static and row-major; and N is
    divisible by a canonical row length (`canonical_row`). Such a kernel computes element i of
    every output from element i of every full-size input and the scalars alone, so walking its
    buffers as rows of C elements computes the same values in the same places."""
    if kernel.group is not None or kernel.custom is not None or kernel.scratch:
        return None
    comp = kernel.comp
    root = comp.root
    if root is None:
        return None
    leaves = output_leaves(comp)
    if not leaves or sorted(kernel.outputs) != list(range(len(leaves))):
        return None
    outs = root.operands if root.opcode == "tuple" else [root]
    if any(o.opcode == "tuple" or not o.shape.is_array for o in outs):
        return None
    dims = tuple(outs[0].shape.dims)
    if not all(full_array(o.shape, dims) for o in outs):
        return None
    if not all(inst is root and root.opcode == "tuple" or reads_linear_index(inst, dims)
               for inst in comp.instructions):
        return None
    n = outs[0].shape.element_count()
    return n if canonical_row(n) is not None else None


def representative(comp: HloComputation, rows: int, row: int) -> HloComputation:
    """A copy of generic kernel computation `comp` (`generic_elements`) in which every full-size
    array is [rows, row] in the default layout and every rank-0 array has the default layout;
    instructions keep their order, opcodes, attributes, literals and parameter numbers."""
    new = HloComputation(f"{comp.name}.generic")
    dims = tuple((comp.root.operands[0] if comp.root.opcode == "tuple" else comp.root).shape.dims)
    full, scalar_layout = (rows, row), Layout.default(0)
    mapping: dict[HloInstruction, HloInstruction] = {}
    for inst in comp.instructions:
        q = inst.clone(operands=[mapping[o] for o in inst.operands])
        if inst.shape.is_array:
            s = inst.shape
            q.shape = (ArrayShape(s.dtype, full, (False, False), Layout.default(2)) if tuple(s.dims) == dims
                       else ArrayShape(s.dtype, (), (), scalar_layout))
        elif inst is comp.root:  # the tuple of outputs
            q.shape = TupleShape(tuple(o.shape for o in q.operands))
        mapping[inst] = new.add_instruction(q)
    new.root = mapping[comp.root]
    return new


def _streams(comp: HloComputation, rows: int, row: int, target) -> bool:
    """Whether the loop emitter writes a kernel for `comp` walked as `rows` rows of `row`
    elements with streaming stores (cpu_loop.streams_rows, which reads only the target of the
    skeleton it is given)."""
    return streams_rows(SimpleNamespace(target=target), comp, LoopShape((rows, row), True),
                        output_leaves(comp))


def representative_rows(comp: HloComputation, n: int, row: int, streams: bool) -> int:
    """R0, the rows of the representative of `comp` (n elements walked as rows of `row`,
    `representative`), chosen so that the loop emitter takes the streaming decision `streams`
    it takes for the kernel's own n / row rows (`_streams`): PLAIN_ROWS where that does not
    stream, else the least row count (at least PLAIN_ROWS) that streams. The streaming rule
    compares the bytes a kernel moves, linear in its rows, with the L3 size; `generic_kernels`
    checks the representative's decision all the same (a kernel moving more than L3 in
    PLAIN_ROWS rows but not in its own one row has no such count)."""
    if not streams:
        return PLAIN_ROWS
    full_bytes = sum(leaf.byte_size() for p in comp.parameters for leaf in p.shape.leaves() if leaf.rank > 0)
    full_bytes += sum(leaf.shape.byte_size() for leaf in output_leaves(comp))
    fixed = sum(leaf.byte_size() for p in comp.parameters for leaf in p.shape.leaves() if leaf.rank == 0)
    per_row = full_bytes // (n // row)
    return max(PLAIN_ROWS, (cpu_row.l3_cache_bytes() - fixed) // per_row + 1)


def generic_kernels(kernels: list[KernelPlan], target) -> list[KernelPlan]:
    """Turn every eligible kernel of `kernels` (`generic_elements`) into its shape-generic form,
    in place: its computation becomes its representative (`representative`, R0 from
    `representative_rows`), its work units N / C rows of C elements. A kernel whose
    representative would not take its streaming decision is left as it is. Returns the kernels
    changed. For the CPU only (see the module doc)."""
    if not GENERIC_KERNELS:
        return []
    changed = []
    seen: set[int] = set()  # (a plan listed twice is changed once)
    for k in kernels:
        if id(k) in seen:
            continue
        seen.add(id(k))
        n = generic_elements(k)
        if n is None:
            continue
        row = canonical_row(n)
        streams = _streams(k.comp, n // row, row, target)
        rows = representative_rows(k.comp, n, row, streams)
        rep = representative(k.comp, rows, row)
        if _streams(rep, rows, row, target) != streams:
            continue
        k.comp, k.units, k.unit_elements = rep, n // row, row
        changed.append(k)
    return changed


def shared_levels(changed: list[KernelPlan], small: set[int]) -> set[int]:
    """`small` (the ids of the kernels compiled at the small level, kernel_work.small_kernels)
    less those of the `changed` kernels (`generic_kernels`) whose structure another of them is
    compiled at O3: they run that kernel, faster, for no compile time. The small level is chosen
    per kernel, by its own size, within a budget, cheapest first, so one structure over
    several sizes was split across the two levels (MobileNetV2's per-channel batch-norm factors
    over 384 channels: 3 kernels small, 5 at O3, two compiled functions for one)."""
    if not changed or not small:
        return small
    at_o3 = {kernel_text(k) for k in changed if id(k) not in small}
    promoted = {id(k) for k in changed if id(k) in small and kernel_text(k) in at_o3}
    return small - promoted if promoted else small
