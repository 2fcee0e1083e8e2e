"""The elemental emitter (XLA's MakeElementGenerator), shared by every target.

For each instruction of a fused computation it builds a *generator*: a function from an
output index (an `Index` of i64 values) to the LLVM value of that element. Generators are
composed through operands; the per-opcode rules are attached to the op registry with
`register_elemental` (elemental_math.py for arithmetic, elemental_convert.py for conversions,
elemental_data.py for data movement). A kernel emitter supplies how a fused parameter is read (`param_gen`) and asks
for the root's generator.

Register representation of element types: pred is i1 (i8 in memory), integers are iN with
the signedness taken from the HLO type (s4/u4 are i4 and s2/u2 i2, one per byte in memory as
ml_dtypes stores them, the high bits zero), f16 is `half`, bf16 is its i16 bit pattern (LLVM
arithmetic on it goes through f32 with round-to-nearest-even back), the 8/6/4-bit floats are
their bit pattern in an i8, computed in f32 (elemental_narrow.py), f32/f64 are float/double.
A value of tuple shape is a Python tuple of values.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from llvmlite import ir

from ..hlo.dtypes import ElementType
from ..hlo.errors import UnsupportedError
from ..hlo.ir import HloComputation, HloInstruction
from ..hlo.op_conditions import denormal_mode
from ..hlo.walk import post_order
from ..hlo.rule_loader import load_rules
from . import elemental_narrow as narrow
from .ir_helpers import F16, F32, F64, I1, I8, I16, I32, Index, flush_denormal_bits


def supported_type(et: ElementType) -> bool:
    """pred, 2..64-bit integers, every float type (f64 down to the 4-bit floats) and complex;
    not the 1-bit integers (an i1 register is pred's: s1/u1 would need their own handling).
    The 2- and 4-bit integers are iN in registers and one per byte in memory, the high bits
    zero, as ml_dtypes stores them (XLA's cpu_copy_test copies a u2 transpose)."""
    if et.is_pred or et.is_complex:
        return True
    if et.is_integer:
        return et.bits in (2, 4, 8, 16, 32, 64)
    return et.is_float and (et.bits >= 16 or narrow.is_narrow_float(et.name))


def check_type(et: ElementType, inst: HloInstruction | None = None) -> None:
    """UnsupportedError (naming the instruction) for element types the emitters do not handle."""
    if not supported_type(et):
        where = f" in instruction {inst.name} ({inst.opcode})" if inst is not None else ""
        raise UnsupportedError(f"element type {et.name} is not supported by the LLVM emitters{where}")


def reg_type(et: ElementType) -> ir.Type:
    """LLVM type of an element held in a register."""
    check_type(et)
    if et.is_pred:
        return I1
    if et.name == "bf16":
        return I16
    if narrow.is_narrow_float(et.name):
        return I8
    if et.name == "f16":
        return F16
    if et.name == "f32":
        return F32
    if et.name == "f64":
        return F64
    if et.name == "c64":
        return ir.LiteralStructType([F32, F32])
    if et.name == "c128":
        return ir.LiteralStructType([F64, F64])
    return ir.IntType(et.bits)


def scalar_constant(et: ElementType, value) -> ir.Constant:
    """An LLVM constant of register type for one element value."""
    ty = reg_type(et)
    if et.is_pred:
        return ir.Constant(I1, int(bool(value)))
    if et.name == "bf16":
        return ir.Constant(I16, int(np.asarray(value, dtype=et.numpy).view(np.uint16)))
    if ty == ir.IntType(8) and et.is_float:  # a narrow float: its bit pattern
        return ir.Constant(ty, int(np.asarray(value, dtype=et.numpy).reshape(1).view(np.uint8)[0]))
    if et.is_complex:
        value = complex(value)
        return ir.Constant(ty, [float(value.real), float(value.imag)])
    if et.is_float:
        return ir.Constant(ty, float(value))
    return ir.Constant(ty, int(value))


def mem_type(et: ElementType) -> ir.Type:
    """LLVM type of an element in memory (pred and 4-bit integers take a byte)."""
    return I8 if et.is_pred or et.bits < 8 else reg_type(et)


def compute_type(et: ElementType) -> ir.Type:
    """Type float arithmetic on `et` is done in (f16, bf16 and the narrower floats compute in f32)."""
    if et.name in ("bf16", "f16") or narrow.is_narrow_float(et.name):
        return F32
    return reg_type(et)


def to_compute(b: ir.IRBuilder, v: ir.Value, et: ElementType) -> ir.Value:
    """Widen a register value of a 16-bit or narrower float to f32 (identity otherwise)."""
    if narrow.is_narrow_float(et.name):
        return narrow.decode(b, v, et.name)
    if et.name == "bf16":
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)
    if et.name == "f16":
        return b.fpext(v, F32)
    return v


def bf16_from_f32(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Round an f32 to bf16 bits, to nearest even; a NaN becomes the canonical quiet NaN with its
    sign (0x7fc0 / 0xffc0), as XLA:CPU's convert and ml_dtypes (the interpreter) give."""
    bits = b.bitcast(v, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(lsb, ir.Constant(I32, 0x7FFF))), ir.Constant(I32, 16))
    sign = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x8000))
    nan = b.or_(sign, ir.Constant(I32, 0x7FC0))
    isnan = b.fcmp_unordered("uno", v, v)
    return b.trunc(b.select(isnan, nan, rounded), I16)


def from_compute(b: ir.IRBuilder, v: ir.Value, et: ElementType) -> ir.Value:
    """Round a compute value back to the register type of `et`. An f64 goes to a narrow float
    through f32 (two roundings), as ml_dtypes converts and the interpreter therefore does."""
    if narrow.is_narrow_float(et.name):
        return narrow.encode(b, b.fptrunc(v, F32) if v.type == F64 else v, et.name)
    if et.name == "bf16":
        if v.type != F32:
            v = b.fptrunc(v, F32)
        return bf16_from_f32(b, v)
    if et.name == "f16":
        return b.fptrunc(v, F16)
    return v


Generator = Callable[[Index], ir.Value]
_MISS = object()


class TupleValue:
    """A tuple-shaped value at one index, its elements computed when read.

    The elements of a tuple may have different dimensions (a `(f32[4,8], f32[])` parameter),
    so an index means something only for the element that is read (by get-tuple-element, or
    as one output leaf): reading every element at it would index the others out of shape."""

    def __init__(self, elements: list, index: Index) -> None:
        self._elements = elements
        self._index = index

    def __getitem__(self, k: int):
        return self._elements[k](self._index)

    def __len__(self) -> int:
        return len(self._elements)

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def materialize(self) -> tuple:
        """The value as a (nested) Python tuple of LLVM values: for rank-0 tuples (the result
        of an inlined scalar computation), where one index serves every element."""
        return tuple(v.materialize() if isinstance(v, TupleValue) else v for v in self)


class TupleGenerator:
    """The generator of a tuple-shaped value made of element generators (a `tuple`
    instruction, a tuple parameter): get-tuple-element takes element k's generator itself."""

    def __init__(self, elements: list) -> None:
        self.elements = list(elements)

    def __call__(self, index: Index) -> TupleValue:
        return TupleValue(self.elements, index)


def materialize(value):
    """`value` with every TupleValue in it turned into a Python tuple."""
    return value.materialize() if isinstance(value, TupleValue) else value


class Reading:
    """A raw generator that says beforehand which (generator, index) pairs it reads.

    `plan(index)` computes what the rule needs from the output index (operand indices, masks);
    it is memoized like a value, so the emitter's pre-pass and the rule's own evaluation share
    the same operand Index objects (and hence cache entries). `reads(plan)` lists the pairs;
    `compute(index, plan)` makes the value. Rules whose operand indices follow from the output
    index (data movement) use it so long chains are evaluated without Python recursion."""

    def __init__(self, em: "ElementalEmitter", plan: Callable | None, reads: Callable, compute: Callable) -> None:
        self.em = em
        self._plan = plan
        self._reads = reads
        self._compute = compute
        self.key = ("plan", self)

    def plan(self, index: Index):
        """The memoized plan of `index` (the index itself when there is no plan)."""
        if self._plan is None:
            return index
        return self.em.memo(self.key, index, lambda: self._plan(index))

    def deps(self, index: Index) -> list:
        """The (generator, Index) pairs the value at `index` reads."""
        return self._reads(self.plan(index))

    def __call__(self, index: Index):
        return self._compute(index, self.plan(index))


def remap(em: "ElementalEmitter", g: Generator, mapping: Callable[[Index], Index],
          finish: Callable | None = None) -> Reading:
    """Raw generator reading `g` at `mapping(index)` (then `finish(value)`, if given)."""
    if finish is None:
        return Reading(em, mapping, lambda j: [(g, j)], lambda _idx, j: g(j))
    return Reading(em, mapping, lambda j: [(g, j)], lambda _idx, j: finish(g(j)))


class _Node:
    """A memoized generator: calling it evaluates through the emitter's value cache."""

    __slots__ = ("em", "key", "raw", "deps")

    def __init__(self, em: "ElementalEmitter", key: tuple, raw: Callable, deps: Callable | None) -> None:
        self.em = em
        self.key = key
        self.raw = raw
        self.deps = deps

    def __call__(self, index: Index):
        return self.em.evaluate(self, index)


def dims_of(inst: HloInstruction) -> tuple[int, ...]:
    """Dimensions of an array-shaped instruction (() for tuples)."""
    return tuple(inst.shape.dims) if inst.shape.is_array else ()


class ElementalEmitter:
    """Builds generators for the instructions of one computation at one builder position.

    `param_gen(parameter) -> Generator` says how parameters are read (a load from a kernel
    argument, or a value already computed for an inlined scalar computation).

    Neither building nor evaluating generators recurses in Python along the graph, so fused
    computations thousands of instructions deep are fine: `gen` builds the missing operand
    generators bottom-up from an explicit post-order first, and `evaluate` first computes,
    with an explicit stack, the values an instruction reads at indices known beforehand
    (elementwise operands at the same index, `Reading` rules), so each rule finds its operand
    values in the cache.
    """

    def __init__(self, builder: ir.IRBuilder, target, param_gen: Callable[[HloInstruction], Generator]) -> None:
        load_rules("elemental")  # the rule modules (elemental_*.py) import this module's names
        self.b = builder
        self.target = target
        self.param_gen = param_gen
        self.fp_flags: tuple[str, ...] = ()  # fast-math flags for float add/mul (reductions)
        # Whether this emitter inlines a reducer (call_scalar's `reduction`): its max/min stay
        # the bare intrinsic that LLVM vectorizes as a reduction (elemental_math.emit_max).
        self.in_reducer = False
        self._gens: dict[HloInstruction, Generator] = {}
        self._cache: dict[tuple, tuple] = {}
        # Values computed by the evaluations in progress, innermost last. Each evaluation
        # computes its values at the top level of one region of the emitted code (every rule
        # returns at the point where it started, after any loops or branches it emitted), so
        # they dominate whatever is emitted later in that evaluation, in whichever block.
        self._scopes: list[dict] = []
        # per computation, the instructions whose values may hold a denormal literal's bits
        self._literal_denormals: dict[HloComputation, frozenset] = {}
        # elemental_branches.py: instructions' arithmetic weights, and the branches open now
        self.weights: dict[HloInstruction, int] = {}
        self.branch_depth = 0

    @property
    def module(self) -> ir.Module:
        """The LLVM module being emitted into."""
        return self.b.module

    # ---- building generators ------------------------------------------------------------
    def gen(self, inst: HloInstruction) -> Generator:
        """The (memoized) generator of `inst`."""
        g = self._gens.get(inst)
        if g is not None:
            return g
        for node in self._unbuilt_post_order(inst):
            self._gens[node] = self._build(node)
        return self._gens[inst]

    def _unbuilt_post_order(self, inst: HloInstruction) -> list[HloInstruction]:
        """`inst` and its transitive operands without a generator yet, operands first."""
        return post_order([inst], lambda node: [o for o in node.operands if o not in self._gens])

    def _build(self, inst: HloInstruction) -> Generator:
        if inst.opcode == "parameter":
            raw = self.param_gen(inst)
        else:
            rule = inst.info.elemental
            if rule is None:
                reason = inst.info.unsupported.get("elemental", "it has no element generator")
                raise UnsupportedError(f"cannot emit {inst.opcode} instruction {inst.name}: {reason}")
            for leaf in inst.shape.leaves():
                check_type(leaf.dtype, inst)
            raw = rule(self, inst)
        return self._memoized(("inst", inst), inst, raw)

    def _memoized(self, key: tuple, inst: HloInstruction | None, raw):
        if isinstance(raw, _Node):
            return raw  # another instruction's generator (a no-op broadcast, get-tuple-element)
        if isinstance(raw, TupleGenerator):
            return TupleGenerator([self._memoized(key + (k,), None, e) for k, e in enumerate(raw.elements)])
        deps = getattr(raw, "deps", None)
        if deps is None and inst is not None and inst.info.elementwise:
            # Elementwise operands are read at the output index (rank-0 ones, in old-style
            # HLO, at the scalar index: not listed, the rule reads them itself).
            same = [self._gens.get(op) for op in inst.operands
                    if op.shape.is_array and dims_of(op) == dims_of(inst)]
            same = [g for g in same if isinstance(g, _Node)]
            if same:
                deps = lambda idx: [(g, idx) for g in same]  # noqa: E731
        return _Node(self, key, raw, deps)

    def override(self, inst: HloInstruction, gen: Generator) -> None:
        """Make `gen` the generator of `inst` (uncached): kernel emitters use it to feed values
        they computed themselves (a reduction's accumulators) into epilogue generators."""
        self._gens[inst] = gen

    # ---- evaluating ---------------------------------------------------------------------
    def _lookup(self, key: tuple, index: Index):
        ik = index.key()
        hit = self._cache.get((key, ik, self.b.block), _MISS)
        if hit is not _MISS:
            return hit
        for scope in reversed(self._scopes):
            hit = scope.get((key, ik), _MISS)
            if hit is not _MISS:
                return hit
        return _MISS

    def _store(self, key: tuple, index: Index, value) -> None:
        # The block-keyed entry serves later evaluations: a value is reused only inside the
        # block that computed it, so it dominates the use.
        ik = index.key()
        self._cache[(key, ik, self.b.block)] = value
        if self._scopes:
            self._scopes[-1][(key, ik)] = value

    def memo(self, key: tuple, index: Index, compute: Callable):
        """`compute()`, memoized per (key, index) like generator values."""
        v = self._lookup(key, index)
        if v is _MISS:
            v = compute()
            self._store(key, index, v)
        return v

    def evaluate(self, node: _Node, index: Index):
        """The value of memoized generator `node` at `index`.

        The values it reads at indices known beforehand are computed first, operands before
        users, with an explicit stack; the rules then find them in the cache, so a chain of
        any length costs no Python recursion."""
        v = self._lookup(node.key, index)
        if v is not _MISS:
            return v
        self._scopes.append({})
        try:
            stack = [(node, index, False)]
            while stack:
                n, idx, expanded = stack.pop()
                if self._lookup(n.key, idx) is not _MISS:
                    continue
                if not expanded and n.deps is not None:
                    stack.append((n, idx, True))
                    for d, di in n.deps(idx):
                        if isinstance(d, _Node) and self._lookup(d.key, di) is _MISS:
                            stack.append((d, di, False))
                    continue
                self._store(n.key, idx, n.raw(idx))
            return self._lookup(node.key, index)
        finally:
            self._scopes.pop()

    def operand(self, inst: HloInstruction, i: int) -> Generator:
        """The generator of operand `i` of `inst`.

        On a target that runs with denormals-are-zero, an operand that `inst` reads flushed
        (the registry's `denormals` field) comes through `flush_literal`: the hardware reads a
        denormal as zero at run time, but LLVM folds intrinsics (minimum, sqrt, ...) on
        constants with the denormal, so a literal would otherwise give another answer than the
        same value read from memory (found by the graph fuzzer: rsqrt(minimum(1, 1e-40)))."""
        operand = inst.operands[i]
        g = self.gen(operand)
        if self.target.flushes_denormals and reads_operand_flushed(inst, i):
            et = operand.shape.dtype
            if et.name in ("f32", "f64", "bf16"):
                if operand.opcode != "constant" and self._may_hold_literal_denormal(operand):
                    # A denormal literal reaching `inst` through data movement (a pad's padding,
                    # a concatenate's or a select's constant part, found by the graph fuzzer,
                    # seeds 30 and 32: rsqrt(concatenate(x, broadcast(1e-40)))) is a register
                    # value here, a constant only after LLVM simplifies, too late for
                    # flush_literal: flushed at run time instead, in such kernels only.
                    b = self.b
                    return lambda idx: flush_denormal_bits(b, g(idx), et.name)
                return lambda idx: flush_literal(g(idx), et)
        return g

    def _may_hold_literal_denormal(self, inst: HloInstruction) -> bool:
        """Whether `inst` depends, in its computation, on a constant holding an f32, f64 or
        bf16 denormal (almost never: the walk is once per computation, on its constants)."""
        comp = inst.parent
        found = self._literal_denormals.get(comp)
        if found is None:
            found = frozenset(literal_denormal_dependents(comp))
            self._literal_denormals[comp] = found
        return inst in found

    def value(self, inst: HloInstruction, index: Index) -> ir.Value:
        """The value of `inst` at `index`."""
        return self.gen(inst)(index)

    def scalar(self, inst: HloInstruction) -> ir.Value:
        """The value of a rank-0 instruction."""
        return self.gen(inst)(Index(self.b, (), multi=()))

    def call_scalar(self, comp: HloComputation, args: list, reduction: bool = False) -> ir.Value | tuple:
        """Inline a scalar computation (a reducer, a map function) on register values `args`.

        In a reduction the target may allow reassociating float adds and multiplies (XLA does:
        vectorized row reductions on CPU, trees on GPU), which is what lets LLVM vectorize. Not
        when the reducer works on a float narrower than f32 (f16, bf16, the 8-bit floats): every
        step rounds to that type, so the order is the result, and XLA's order is the one the
        emitters lay out (its tree windows, a reduce-window's window loop) step for step."""
        args = [materialize(a) for a in args]
        params = {p.parameter_number: a for p, a in zip(comp.parameters, args)}
        if len(comp.parameters) != len(args):
            raise UnsupportedError(f"computation {comp.name} takes {len(comp.parameters)} parameters, got {len(args)}")
        sub = ElementalEmitter(self.b, self.target, lambda p: _scalar_param(params[p.parameter_number]))
        sub.in_reducer = reduction
        if reduction and self.target.reassociate_reductions and not _has_narrow_float(comp):
            sub.fp_flags = ("reassoc", "contract")
        return materialize(sub.scalar(comp.root))

    def global_constant(self, inst: HloInstruction, data: np.ndarray, et: ElementType) -> ir.Value:
        """An LLVM global holding `data` (raw bytes), as a pointer to its first element."""
        raw = np.ascontiguousarray(data).tobytes()
        arr_ty = ir.ArrayType(I8, len(raw))
        name = f"const.{inst.name}.{len(self.module.globals)}"
        space = getattr(self.target, "constant_address_space", 0)
        gv = ir.GlobalVariable(self.module, arr_ty, name=name, addrspace=space)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.align = 64
        gv.initializer = ir.Constant(arr_ty, bytearray(raw))
        # A constant expression (not an instruction), so it is valid wherever it is used.
        return gv.bitcast(mem_type(et).as_pointer(space))


def reads_operand_flushed(inst: HloInstruction, i: int) -> bool:
    """Whether `inst` reads operand `i` as denormals-are-zero does (a denormal as a zero of its
    sign): operands of ops whose `denormal_mode` is `flush` and the divisor of `flush-divisor`
    ops. The interpreter applies the same field
    (runtime/interpreter/denormals.py); docs/denormals.md has XLA:CPU's measurements."""
    mode = denormal_mode(inst)
    return mode == "flush" or (mode == "flush-divisor" and i == 1)


def literal_denormal_dependents(comp: HloComputation) -> set[HloInstruction]:
    """The instructions of `comp` that depend (through operands, in `comp`) on a constant
    holding an f32, f64 or bf16 denormal, the constants included; empty for the usual
    computation, whose constants are looked at and nothing else is walked."""
    seeds = [i for i in comp.instructions if i.opcode == "constant" and _holds_denormal(i)]
    if not seeds:
        return set()
    found = set(seeds)
    for inst in comp.post_order():
        if inst not in found and any(o in found for o in inst.operands):
            found.add(inst)
    return found


def _holds_denormal(inst: HloInstruction) -> bool:
    from ..runtime.interpreter.denormals import subnormal_mask  # (runtime imports the emitters)

    if inst.literal is None or not inst.shape.is_array or inst.shape.dtype.name not in ("f32", "f64", "bf16"):
        return False
    mask = subnormal_mask(np.asarray(inst.literal, dtype=inst.shape.dtype.numpy))
    return mask is not None and bool(mask.any())


def flush_literal(v, et: ElementType):
    """`v`, or a zero of its sign where it is an LLVM constant holding an f32/f64/bf16 denormal
    (bf16 is held as its i16 bits); any other value passes unchanged (DAZ reads it at run time)."""
    if not isinstance(v, ir.Constant):
        return v
    if et.name == "bf16":
        bits = v.constant
        if isinstance(bits, int) and bits & 0x7F80 == 0 and bits & 0x7F:
            return ir.Constant(v.type, bits & 0x8000)
        return v
    value = v.constant
    if isinstance(value, float) and value != 0.0 and abs(value) < float(np.finfo(et.numpy).tiny):
        return ir.Constant(v.type, math.copysign(0.0, value))
    return v


def _has_narrow_float(comp: HloComputation) -> bool:
    """Whether a parameter of `comp` holds a float narrower than f32."""
    return any(leaf.dtype.is_float and leaf.dtype.bits < 32
               for p in comp.parameters for leaf in p.shape.leaves())


def _scalar_param(value) -> Generator:
    """Generator of an inlined computation's parameter bound to `value` (a nested tuple for
    a tuple parameter, whose elements get-tuple-element then takes apart)."""
    if isinstance(value, tuple):
        return TupleGenerator([_scalar_param(v) for v in value])
    return lambda _idx: value

