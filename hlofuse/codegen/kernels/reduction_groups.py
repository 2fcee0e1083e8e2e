"""Reduction groups: what one reduction kernel writes, shared by the CPU and the GPU kernels.

A group of root reduces that read inputs of the same dimensions and reduce the same
dimensions is emitted in one pass over the input, together with root elementwise outputs
of the input's dimensions (multi-output fusion: each input element is visited once, so
those outputs are written from the same loop), and outputs computed from the reduces at
their own output index (the epilogue).

Only outputs that read the reduces at their own output index can be an epilogue: a kernel
holds one output element's accumulated value at a time (`reads_heroes_at_output_index`);
others (a reverse, a transpose, a slice ... of the reduce) leave the reduction kernel.

A reduce into a float narrower than f32 rounds to its type after every step, as XLA:CPU
does, so its order is part of its result (`is_order_sensitive_reduce`): its kernel is
emitted without reassociation (`in_order_target`). `ReduceHero` and `override_heroes` are
the accumulator plumbing both targets' reduction kernels use (cpu_reduction.py,
gpu_reduction.py).
"""
from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass


from ...emitters.cpu.target import host_cpu, preferred_vector_width
from ...emitters.elemental import ElementalEmitter, dims_of, reg_type
from ...emitters.ir_helpers import Index
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.reducers import binary_reducer_opcode, init_folds_repeatedly
from .args import output_leaves
from .host_caches import l3_cache_bytes

# A column group's unit is a block of at most COLUMN_BLOCK columns whose accumulators fit the
# vector registers (`ReductionGroup.block_columns`): column_accumulator_bytes() (the host's
# vector register file: AVX-512's 32 registers, 2 KiB) where the fold accumulates one value per
# column, half of it where it accumulates several (each value's step needs temporaries of its
# own: the value read, its product).
COLUMN_BLOCK = 512
# Bytes of accumulators (every hero's, every column) a column group whose input comes from
# memory may keep in L1 (`ReductionGroup.block_columns`) to read whole rows (0: blocks of
# registers only, as before).
L1_BLOCK_BYTES = 8 << 10
# Bytes of input rows a column group of several blocks, whose input comes from memory, reads
# per tile (`ReductionGroup.tiles_rows`): each block folds the tile's rows in turn, the later
# blocks reading them from L1 and L2 (0: each block its own pass over every row, as before).
ROW_TILE_BYTES = 32 << 10


@dataclass
class ReductionGroup:
    """Output leaves written by one reduction kernel: reduce heroes (reducing inputs of
    `in_dims` over `rdims`), outputs computed from them by an elementwise epilogue at the
    output index (the reduces themselves are the trivial epilogue), and elementwise outputs
    of the input's dimensions (`extras`)."""

    heroes: list  # reduce instructions
    epilogue: list[int]  # output leaves computed from the heroes at the output index
    extras: list[int]  # elementwise output leaves with the input's dimensions
    in_dims: tuple[int, ...]
    rdims: tuple[int, ...]

    @property
    def is_row(self) -> bool:
        """Whether the minor input dimension is reduced (or all are): register accumulators."""
        return not self.in_dims or (len(self.in_dims) - 1) in self.rdims

    @property
    def kept(self) -> list[int]:
        """Input dimensions that are not reduced."""
        return [d for d in range(len(self.in_dims)) if d not in self.rdims]

    @property
    def out_dims(self) -> tuple[int, ...]:
        """Dimensions of the reduce results."""
        return tuple(self.in_dims[d] for d in self.kept)

    @property
    def out_elements(self) -> int:
        """Elements of each reduce result."""
        return math.prod(self.out_dims)

    @property
    def block_columns(self) -> int:
        """Columns per unit of a column group: `register_block`, the most, a power of two up to
        COLUMN_BLOCK (16 at least), whose accumulators fit column_accumulator_bytes(), or half
        of it when the heroes accumulate more than one value per column.

        A block whose accumulators and the step's temporaries exceed the vector registers is
        spilled every reduced step (and at 4 KiB left unrolled, rolls_reduced_loops). Measured
        (one thread, CPU time, interleaved medians, a 64 MB copy between calls, load 4-5): sum
        and sum of squares of f32[12288,1024] in blocks of 512 / 256 / 128 columns 4.5 / 1.7 /
        1.5 ms, of f32[32,28,28,256] (256 / 128) 1.10 / 0.63 ms, of f32[8,7,7,2048] (512 /
        256 / 128) 0.26 / 0.11 / 0.12 ms; one sum of f32[4096,4096] (512 / 256) 1.84 / 2.16 ms,
        of f32[2048,1024] 0.15 / 0.19 ms (but f32[12288,1024] 1.42 / 1.23 ms).

        An input from memory (larger than L3) folded into one value per column, whose row of
        accumulators fits L1_BLOCK_BYTES, is one block of all its columns instead (`in_l1`): a unit streams its rows whole, one
        contiguous run, and folds each into a row of partial sums that stays in L1. A block of
        registers reads a part of every row, a strided walk the hardware prefetcher serves
        worse. One thread, CPU time, interleaved medians, a 64 MB copy between calls, load
        6.3-6.6 (blocks of registers / a whole row in L1, ms): a sum of |x| over f32[12288,1024]
        1.60-1.65 / 1.44-1.51 (a C loop of the same shape 1.33-1.39), [16384,768] 2.65 / 1.49
        and [8192,1536] 2.47 / 1.50 (a last block of 256 or 512 columns), [6144,2048] 1.64 / 1.55,
        [3072,4096] (16 KiB of accumulators) 1.69 / 1.71, [1536,8192] in blocks of 4096 columns
        in L1 1.76 / 2.60. In cache (warm inputs, 1-12 MB, load 7.5) neither wins by more than
        10%: [256,1024] 0.0168 / 0.0170 ms, [512,1024] 0.027 / 0.030, [2048,1024] 0.082 / 0.081,
        [4096,768] 0.156 / 0.139, so the rule keeps the register blocks there. Folds of several
        values keep them everywhere (batch-norm statistics: a sum and a sum of squares, two
        accumulators loaded and stored per vector in L1), load 7: f32[48,32,32,256] 1.28 / 1.72
        ms, [24,32,32,512] 1.32 / 1.59, [48,16,16,1024] 1.51 / 1.61, [12288,1024] 1.64-1.85 /
        1.62-1.73 (mixed)."""
        registers = self.register_block
        last = self.in_dims[-1] if self.in_dims else 1
        if last <= registers or not L1_BLOCK_BYTES:
            return registers
        several = sum(len(h.operands) // 2 for h in self.heroes) > 1
        if several or last * self._column_bytes > L1_BLOCK_BYTES or self._input_bytes <= l3_cache_bytes():
            return registers
        return last

    @property
    def _input_bytes(self) -> int:
        """Bytes of the reduced input (its elements at the widest of the heroes' input types)."""
        size = max(max(op.shape.dtype.bits // 8, 1) for h in self.heroes for op in h.operands[:len(h.operands) // 2])
        return math.prod(self.in_dims) * size

    @property
    def _column_bytes(self) -> int:
        """Bytes of accumulators per column: one per value each hero folds."""
        return max(sum(max(init.shape.dtype.bits // 8, 1) for h in self.heroes
                       for init in h.operands[len(h.operands) // 2:]), 1)

    @property
    def register_block(self) -> int:
        """The widest block of columns whose accumulators the vector registers hold: a power of
        two up to COLUMN_BLOCK (16 at least) within column_accumulator_bytes(), or half of it
        when the heroes accumulate more than one value per column."""
        several = sum(len(h.operands) // 2 for h in self.heroes) > 1
        budget = column_accumulator_bytes() // (2 if several else 1)
        fit = budget // self._column_bytes
        return max(16, min(COLUMN_BLOCK, 1 << max(fit.bit_length() - 1, 0)))

    @property
    def in_l1(self) -> bool:
        """Whether a column group's block is wider than `register_block`: its accumulators are
        a row of partial sums in L1, loaded and stored every reduced row."""
        if self.is_row or not self.in_dims:
            return False
        return min(self.block_columns, self.in_dims[-1]) > self.register_block

    @property
    def tiles_rows(self) -> bool:
        """Whether a column group's blocks take turns over tiles of ROW_TILE_BYTES of rows: a
        unit is then every block of its kept row, and the input is read in one contiguous pass
        (cpu_reduction._emit_column_tiles). Where the reduced dimensions are all but the last,
        there are two blocks or more (and not a row of partial sums in L1), and the input comes
        from memory (larger than L3): a block at a time, each reads a part of every row, a
        strided walk over the whole input per block. Sum and sum of squares of f32[100352, 96]
        (three blocks of 32 columns on AVX2) in C, medians of 15 with the caches flushed: 9.0
        ms one thread, 4.6 two, a block at a time; 5.1-5.4 and 3.2 in tiles of 56-1024 rows
        (a plain sum of the same bytes: 4.3 and 2.2)."""
        if self.is_row or not self.in_dims or not ROW_TILE_BYTES:
            return False
        if self.kept != [len(self.in_dims) - 1] or self.in_l1 or self.blocks < 2:
            return False
        return self._input_bytes > l3_cache_bytes()

    @property
    def split_extent(self) -> int:
        """What the planner splits into slices (codegen/planning.py): the outermost reduced
        dimension, or for a `tiles_rows` group whose outermost dimension is 1 (a batch of one)
        its rows, which are one contiguous run (its unit is all its columns: unsplit, one
        thread would read the whole input where the blocks were units of their own)."""
        r0 = self.in_dims[self.rdims[0]] if self.rdims else 1
        if r0 < 2 and self.tiles_rows:
            return math.prod(self.in_dims[:-1])
        return r0

    @property
    def tile_rows(self) -> int:
        """Rows per tile of a `tiles_rows` group: ROW_TILE_BYTES of its input's rows."""
        return max(1, ROW_TILE_BYTES // max(1, self._input_bytes // max(1, math.prod(self.in_dims[:-1]))))

    @property
    def units(self) -> int:
        """Work units (outputs, or column blocks; the kept rows where `tiles_rows`)."""
        if self.is_row:
            return self.out_elements
        if self.tiles_rows:
            return math.prod(self.out_dims[:-1])
        return math.prod(self.out_dims[:-1]) * self.blocks

    @property
    def blocks(self) -> int:
        """Column blocks per row of kept dimensions (column case)."""
        return max(1, -(-self.in_dims[-1] // self.block_columns)) if self.in_dims else 1

    @property
    def unit_elements(self) -> int:
        """Input elements visited per unit."""
        if self.is_row:
            return math.prod(self.in_dims[d] for d in self.rdims)
        if self.tiles_rows:
            return math.prod(self.in_dims)
        return math.prod(self.in_dims[d] for d in self.rdims) * min(self.block_columns, self.in_dims[-1])

    @property
    def outputs(self) -> list[int]:
        """Output leaves this kernel writes."""
        return self.epilogue + self.extras


def reduce_heroes(inst) -> list:
    """The reduce instructions `inst` depends on through non-reduce instructions."""
    out, seen, stack = [], set(), [inst]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i.opcode == "reduce":
            out.append(i)
            continue
        stack.extend(i.operands)
    return out


def _signature(r) -> tuple:
    return dims_of(r.operands[0]), tuple(sorted(r.attrs["dimensions"]))


def _minor_to_major(shape) -> tuple[int, ...]:
    layout = shape.layout
    return tuple(layout.minor_to_major) if layout is not None else tuple(range(shape.rank - 1, -1, -1))


def _passes_index_through(inst) -> bool:
    """Whether `inst` reads each operand at its own output index (its generator hands the
    index on unchanged): elementwise ops, tuple plumbing, and the identity forms of reshape,
    bitcast, copy, broadcast and transpose."""
    if inst.info.elementwise or inst.opcode in ("tuple", "get-tuple-element", "copy"):
        return True
    if not inst.shape.is_array or len(inst.operands) != 1 or not inst.operands[0].shape.is_array:
        return False
    same = dims_of(inst) == dims_of(inst.operands[0])
    if inst.opcode == "reshape":
        return same
    if inst.opcode == "bitcast":  # the physical reinterpretation is the identity only under one layout
        return same and _minor_to_major(inst.shape) == _minor_to_major(inst.operands[0].shape)
    if inst.opcode == "broadcast":
        return same and tuple(inst.attrs.get("dimensions", ())) == tuple(range(len(dims_of(inst))))
    if inst.opcode == "transpose":
        return tuple(inst.attrs["dimensions"]) == tuple(range(len(dims_of(inst))))
    return False


def reads_heroes_at_output_index(inst, heroes) -> bool:
    """Whether `inst`, evaluated at output index i, reads every reduce of `heroes` at index i.

    A reduction kernel holds one output element's accumulated value at a time (registers in a
    row, one column block in a column), and its epilogue generators see a hero as that value
    whatever index they ask for. So an epilogue may only reach a hero through ops that pass the
    index through unchanged; a reverse, slice, transpose, pad, concatenate, dynamic-slice, or a
    reshape or broadcast that moves elements would read another output element's value. A
    scalar hero (a full reduction) has one element, so every path to it is fine."""
    targets = {h for h in heroes if dims_of(h) != ()}
    if not targets:
        return True
    # Post order of what `inst` reads, not entering reduces; then, bottom-up, which of those
    # reach a hero: each that does (other than the hero) must pass the index through.
    order, seen, stack = [], set(), [(inst, False)]
    while stack:
        i, done = stack.pop()
        if done:
            order.append(i)
            continue
        if i in seen:
            continue
        seen.add(i)
        stack.append((i, True))
        if i.opcode != "reduce":
            stack.extend((op, False) for op in i.operands)
    reaches: set[HloInstruction] = set()
    for i in order:
        if i in targets:
            reaches.add(i)
        elif i.opcode != "reduce" and any(op in reaches for op in i.operands):
            if not _passes_index_through(i):
                return False
            reaches.add(i)
    return True


def reduction_groups(comp: HloComputation) -> tuple[list[ReductionGroup], list[int]]:
    """Split the output leaves of `comp` into reduction groups and the rest (loop outputs)."""
    leaves = output_leaves(comp)
    groups: dict[tuple, ReductionGroup] = {}
    rest = []
    for k, leaf in enumerate(leaves):
        heroes = reduce_heroes(leaf.inst)
        sigs = {_signature(h) for h in heroes}
        if len(sigs) == 1:
            in_dims, rdims = next(iter(sigs))
            g = groups.get((in_dims, rdims)) or ReductionGroup([], [], [], in_dims, rdims)
            if tuple(leaf.shape.dims) == g.out_dims and reads_heroes_at_output_index(leaf.inst, heroes):
                groups[(in_dims, rdims)] = g
                g.epilogue.append(k)
                g.heroes.extend(h for h in heroes if all(h is not o for o in g.heroes))
                continue
        rest.append(k)
    loops = []
    for k in rest:
        leaf = leaves[k]
        home = next((g for g in groups.values() if g.in_dims and tuple(leaf.shape.dims) == g.in_dims), None)
        if home is not None and not reduce_heroes(leaf.inst):
            home.extras.append(k)
        else:
            loops.append(k)
    return list(groups.values()), loops


def is_order_sensitive_reduce(inst) -> bool:
    """Whether `inst` is a non-variadic reduce into a float narrower than f32 (bf16, f16, f8):
    every step rounds to that type, so the order of the steps is part of the result and must
    be XLA:CPU's (kernel planning rewrites it into XLA's tree of reduce-windows; the kernels
    fold each output sequentially, see `in_order_target`)."""
    return (inst.opcode == "reduce" and inst.shape.is_array and inst.shape.dtype.is_float
            and inst.shape.dtype.bits < 32)


def slices_keep_init(inst, constants: dict | None = None) -> bool:
    """Whether reduce `inst` may be split into slices that each start from its init value (the
    planner's partial kernels, codegen/planning.py) with the result still taking the init once,
    as the interpreter (the oracle) and XLA:CPU do; XLA's contract leaves a non-identity init
    undefined. Yes for a max, min, and or or of the reducer's two parameters (repeating the init
    changes nothing), a variadic reducer that only selects among its operands (an argmax or
    argmin: arg_reduction.selects_operands), and an add or multiply whose init is a constant
    equal to its identity (0, 1). Any other init (`jax.lax.reduce(x, 5.0, add, ...)`, XLA's own
    tests' inits) keeps the reduce unsplit: each of 16 slices added it once, and a sum over
    zeros with init 5 gave 80. An init that is a parameter is looked up in `constants` (the
    caller's constant operands by parameter number); unknown, it keeps the reduce unsplit."""
    from .arg_reduction import selects_operands

    if inst.opcode != "reduce":
        return False
    if not inst.shape.is_array:
        return selects_operands(inst.attrs["to_apply"])
    init = inst.operands[1]
    if init.opcode == "parameter" and constants:
        init = constants.get(init.parameter_number, init)
    return init_folds_repeatedly(binary_reducer_opcode(inst.attrs["to_apply"]), init)


# The vector register width assumed where the target does not say (AVX2).
VECTOR_BITS_DEFAULT = 256


def lanes_of(vector_bits: int | None, bits: int) -> int:
    """Lanes of `bits`-bit elements (a byte at least) in a vector register of `vector_bits`
    (VECTOR_BITS_DEFAULT where None): 16 for f32 in AVX-512's 512 bits."""
    return (vector_bits or VECTOR_BITS_DEFAULT) // max(bits, 8)


def vector_lanes(target, heroes) -> int:
    """Lanes of the target's vector register for the widest accumulator of `heroes` (reduce
    instructions): 16 for f32 on an AVX-512 host."""
    bits = max(init.shape.dtype.bits for h in heroes for init in h.operands[len(h.operands) // 2:])
    return lanes_of(getattr(target, "vector_width", None), bits)


def wide_vectors(vector_bits: int | None) -> bool:
    """Whether kernels prefer AVX-512's 512-bit vectors (32 vector registers); None is LLVM's own
    width, AVX2's 256 bits and 16 registers on the x86 hosts this runs on
    (emitters/cpu/target.preferred_vector_width)."""
    return (vector_bits or 0) >= 512


@functools.lru_cache(maxsize=None)
def vector_registers() -> tuple[int, int]:
    """The count and the size in bytes of the vector registers the host's kernels use: 32 of
    64 bytes where they prefer 512-bit vectors (AVX-512, emitters/cpu/target.py's
    preferred_vector_width), else AVX2's 16 of 32 bytes (VECTOR_BITS_DEFAULT, the width
    `lanes_of` assumes). Asked once per process (the host's features cost LLVM ~10 ms)."""
    bits = preferred_vector_width(host_cpu()[1]) or VECTOR_BITS_DEFAULT
    return (32 if bits >= 512 else 16), bits // 8


def column_accumulator_bytes() -> int:
    """The bytes of accumulators a column block of a one-value fold may keep: the whole vector
    register file (2048 with AVX-512, 512 with AVX2; `ReductionGroup.block_columns`)."""
    count, size = vector_registers()
    return count * size


def row_accumulator_registers() -> int:
    """The most vector registers all of a row loop's reduces may keep as accumulators together:
    half the register file (16 of AVX-512's 32, 8 of AVX2's 16); the loads, products and
    addresses need the rest."""
    return vector_registers()[0] // 2


# Independent vector accumulators per reduce in a row reduction's innermost loop
# (`llvm.loop.interleave.count`), at most row_accumulator_registers() in all.
ROW_ACCUMULATORS = 8


def row_accumulators(lanes: int, accumulators: int, row: int, most: int | None = None) -> int:
    """How many vectors a reassociating row reduction's innermost loop (`row` elements long)
    interleaves, each an independent accumulator of each of its `accumulators` reduced values:
    `most` (`ROW_ACCUMULATORS` unless given), halved until they fit `row_accumulator_registers()`
    and a row holds them all (a shorter row would run in the scalar remainder loop); 1 (LLVM's
    own choice) where that leaves fewer than 2. The loop given a count stays rolled
    (cpu_reduction, cpu_row).

    Why: a row read from memory is folded as fast as the core keeps enough loads in flight, and
    an add waiting for its load and for the previous add of its accumulator holds a scheduler
    entry; with few accumulators those waiting adds fill the schedulers and stall the loads
    behind them. f32 row sums of |x| over [12288, 1024] (48 MB, aligned, one thread, CPU time,
    the kernels' machine code called from a C harness over the same warm input, interleaved
    medians, load 4-5): 1 accumulator 39 GB/s, 2 42, 4 49, 8 55, 16 55; LLVM's own choice (4,
    then the whole row unrolled) 47. The loop must stay rolled: once LLVM unrolls a row, its
    Reassociate pass rebuilds the row's adds into trees of its own whatever the count (an
    interleave count of 8 then gave the same code as 4), and sum and sum of squares of the same
    rows ran at 28.6 GB/s unrolled against 47 rolled with 8. Through hlofuse's runtime, cold
    input (benchmarks/bandwidth_share.py): row_sums 40.8 -> 41.7 GB/s, sum_sumsq 28.7 -> 41.2,
    the read ceiling of one core here. In cache (2 MB, load 7) it
    costs nothing and short rows gain: sum and sum of squares of f32[16384,32] 0.157 -> 0.036 ms
    (2 vectors a row, LLVM had left it scalar), [4096,128], [2048,256], [512,1024] unchanged."""
    count = ROW_ACCUMULATORS if most is None else most
    registers = row_accumulator_registers()
    while count > 1 and (count * accumulators > registers or count * lanes > row):
        count //= 2
    return count if count >= 2 else 1


def computes_expensive_elements(comp: HloComputation, dims: tuple[int, ...]) -> bool:
    """Whether `comp` computes an expensive elementwise op (exp, tanh, divide ...: XLA's
    IsExpensive) per element of `dims`: a loop over those elements is then bound by that
    arithmetic, not by memory, and keeps LLVM's own interleaving (`row_accumulators` is for
    cheap folds: 8 vectors of tanh and exp in flight ran 8% slower, the shared_producer
    workload 2.32 -> 2.50 ms on one thread)."""
    return any(i.info.elementwise and i.info.expensive and i.shape.is_array and tuple(i.shape.dims) == tuple(dims)
               for i in comp.instructions)


def in_order_target(target, heroes):
    """The target to emit a reduction kernel of `heroes` (reduce instructions) with: `target`
    itself, or, when a hero is order-sensitive, a copy that does not reassociate reductions.
    Reassociation would let LLVM reorder a chain of per-step-rounded folds where the narrow
    type is native (the GPU's f16 adds became f16x2 vector sums), and that changes the bits."""
    if not any(is_order_sensitive_reduce(h) for h in heroes):
        return target
    return without_reassociation(target)


def without_reassociation(target):
    """A copy of `target` whose reductions' float ops do not carry `reassoc`."""
    ordered = copy.copy(target)
    ordered.reassociate_reductions = False
    return ordered


class ReduceHero:
    """Generators and accumulator plumbing of one reduce (used by the CPU and the GPU reduction emitters)."""

    def __init__(self, em: ElementalEmitter, inst) -> None:
        n = len(inst.operands) // 2
        self.inst = inst
        self.n = n
        self.inputs = [em.gen(op) for op in inst.operands[:n]]
        self.inits = [em.gen(op) for op in inst.operands[n:]]
        self.comp = inst.attrs["to_apply"]
        self.types = [op.shape.dtype for op in inst.operands[n:]]
        self.reg_types = [reg_type(et) for et in self.types]

    def init_values(self, b):
        """The init values of the reduce (rank-0 generators)."""
        return [g(Index(b, (), multi=())) for g in self.inits]

    def fold(self, em: ElementalEmitter, accs: list, index: Index) -> list:
        """Fold the input values at `index` into accumulators `accs` with the reducer."""
        values = [g(index) for g in self.inputs]
        res = em.call_scalar(self.comp, list(accs) + values, reduction=True)
        return list(res) if isinstance(res, tuple) else [res]


def override_heroes(em: ElementalEmitter, heroes, current, at) -> None:
    """Make each hero's generator return its accumulated value (`current(hero)` at emission time),
    so epilogue generators created afterwards read the accumulators.

    That value is the hero's element at the output index `at()` the epilogue is being evaluated
    at, and no other: `reduction_groups` only puts outputs that read the heroes there in the
    epilogue (`reads_heroes_at_output_index`), and a generator asking for another index is a
    compiler bug, stopped here rather than silently given the wrong element."""
    for h in heroes:
        def gen(idx: Index, h=h):
            expected = at()
            if idx.dims and (idx.dims != expected.dims or idx.key() != expected.key()):
                raise RuntimeError(f"internal error: reduction epilogue reads {h.inst.name} away from the output index")
            vals = current(h)
            return tuple(vals) if h.n > 1 else vals[0]

        em.override(h.inst, gen)
