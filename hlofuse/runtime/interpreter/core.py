"""The reference interpreter: evaluates HLO with numpy, one registry rule per opcode.

A Value is a numpy array (for array shapes), a tuple of Values (tuple shapes) or TOKEN (token
shapes). Rules are registered on the op registry with `@register_reference(opcode, ...)` as
`fn(inst, args: list[Value], interp: Interpreter) -> Value` by the family modules that
`hlo.rule_loader` lists for the "reference" stage; the interpreter loads them and then reads
nothing but the registry rows, so an opcode without a rule is reported with the registry's reason.

The interpreter is the oracle of the compiled backends: it shares no code with them. It models
XLA:CPU's floating-point mode (denormals flushed) for every instruction in `evaluate_instruction`
(denormals.py).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...hlo.errors import HloError, InputError, UnsupportedError
from ...hlo.ir import HloComputation, HloInstruction, HloModule
from ...hlo.op_conditions import denormal_mode
from ...hlo.opcodes import op_info
from ...hlo.rule_loader import load_rules
from ...hlo.shapes import ArrayShape, Shape, TokenShape, TupleShape
from . import denormals

Value = Any  # np.ndarray | tuple[Value, ...] | Token


# The interpreter's floating-point modes: XLA:CPU's (flush) and XLA:GPU's default (keep).
DENORMAL_SEMANTICS = ("flush", "keep")


class Token:
    """The value of a token-shaped instruction (orders side effects; carries no data)."""

    _instance: "Token | None" = None

    def __new__(cls) -> "Token":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TOKEN"


TOKEN = Token()


def _side_effecting(inst: HloInstruction, known: dict[HloComputation, bool]) -> bool:
    """Whether `inst` has a side effect: its row says so, or a computation it calls (at any
    depth) holds such an instruction (`known` memoises computations). The passes' own version
    (passes/rewrite.has_side_effect) is not imported: the oracle takes nothing from what it
    checks."""
    if op_info(inst.opcode).side_effecting:
        return True
    for comp in inst.called_computations():
        if comp not in known:
            known[comp] = False  # (a computation calling itself is not a side effect)
            known[comp] = any(_side_effecting(i, known) for i in comp.instructions)
        if known[comp]:
            return True
    return False


def live_order(comp: HloComputation) -> list[HloInstruction]:
    """The instructions of `comp` that its result or a side effect depends on, operands first.

    An instruction nothing reads and that has no side effect cannot change what the program
    computes (XLA's dead-code elimination removes it, and every compiled pipeline with it), so
    the oracle does not evaluate it either: a dead while loop that never ends (XLA's while
    loop unroller tests have one), or a dead instruction of an op the interpreter lacks, must
    not decide the reference's answer. Parameters are always kept (their count is the
    computation's signature)."""
    order = comp.post_order()
    known: dict[HloComputation, bool] = {}
    live: set[HloInstruction] = set()
    stack = [i for i in order if i is comp.root or i.opcode == "parameter" or _side_effecting(i, known)]
    while stack:
        inst = stack.pop()
        if inst in live:
            continue
        live.add(inst)
        stack.extend(inst.operands)
        stack.extend(inst.control_predecessors)
    return [i for i in order if i in live]


class InterpreterBug(RuntimeError):
    """A reference rule produced a value that does not match its instruction's shape."""


class Interpreter:
    """Evaluates computations of one module.

    `call(computation, args)` is the entry point for rules that evaluate called computations
    (while bodies, reducers, fusions ...). `batched` calls evaluate a scalar computation on
    whole arrays at once (used to vectorize reducers and mapped computations: every element-
    wise rule broadcasts), which skips the per-instruction dimension check.
    """

    def __init__(self, module: HloModule | None = None, max_while_iterations: int | None = None,
                 denormals: str = "flush") -> None:
        load_rules("reference")
        if denormals not in DENORMAL_SEMANTICS:
            raise ValueError(f"denormals must be one of {', '.join(DENORMAL_SEMANTICS)}, not {denormals!r}")
        self.module = module
        self.denormals = denormals
        self.max_while_iterations = max_while_iterations
        self._frames: list[Sequence[Value]] = []
        self._batched = 0
        # Evaluation order per computation; computations are not changed while evaluating.
        self._order: dict[HloComputation, list[HloInstruction]] = {}

    # ---- evaluation ---------------------------------------------------------------------
    def call(self, computation: HloComputation, args: Sequence[Value]) -> Value:
        """Evaluate `computation` on `args` (one Value per parameter) and return its root's Value."""
        n_params = len(computation.parameters)
        if len(args) != n_params:
            raise InputError(f"computation {computation.name} takes {n_params} arguments, got {len(args)}")
        env: dict[HloInstruction, Value] = {}
        self._frames.append(args)
        try:
            order = self._order.get(computation)
            if order is None:
                order = self._order[computation] = live_order(computation)
            with np.errstate(all="ignore"):
                for inst in order:
                    env[inst] = self.evaluate_instruction(inst, [env[op] for op in inst.operands])
        finally:
            self._frames.pop()
        return env[computation.root]

    def call_batched(self, computation: HloComputation, args: Sequence[Value]) -> Value:
        """Evaluate a computation of scalars on arrays of equal shape, elementwise at once.

        Only valid when every instruction of `computation` is elementwise (or a parameter,
        constant, tuple, get-tuple-element or scalar-to-scalar broadcast); see
        `is_elementwise_computation`.
        """
        self._batched += 1
        try:
            return self.call(computation, args)
        finally:
            self._batched -= 1

    def evaluate_instruction(self, inst: HloInstruction, args: list[Value]) -> Value:
        """Apply the registered reference rule of `inst` to its operand values."""
        info = op_info(inst.opcode)
        rule = info.reference
        if rule is None:
            reason = info.unsupported.get("reference", "no reference rule is registered")
            raise UnsupportedError(f"the interpreter does not support {inst.opcode} "
                                   f"(instruction {inst.name}): {reason}")
        # XLA:CPU's FTZ/DAZ, modelled here for every op (denormals.py); "keep" models XLA:GPU.
        mode = denormal_mode(inst) if self.denormals == "flush" else "keep"
        if mode == "keep":
            value = rule(inst, args, self)
        else:
            value = denormals.result(inst, mode, args, rule(inst, denormals.operands(inst, mode, args), self))
        if isinstance(value, np.generic):  # numpy ufuncs on 0-d arrays return scalars
            value = np.asarray(value)
        self._check(inst, value)
        return value

    def parameter_value(self, inst: HloInstruction) -> Value:
        """The argument bound to parameter `inst` in the computation being evaluated."""
        return self._frames[-1][inst.parameter_number]

    @property
    def batched(self) -> bool:
        """True while evaluating a scalar computation on whole arrays (see `call_batched`)."""
        return self._batched > 0

    # ---- checks -------------------------------------------------------------------------
    def _check(self, inst: HloInstruction, value: Value) -> None:
        problem = _mismatch(inst.shape, value, check_dims=not self._batched)
        if problem:
            raise InterpreterBug(f"reference rule of {inst.opcode} gave a wrong value for {inst.name} "
                                 f"({inst.shape}): {problem}")


def _mismatch(shape: Shape, value: Value, check_dims: bool = True) -> str | None:
    """Why `value` is not a Value of `shape`, or None."""
    if isinstance(shape, TupleShape):
        if not isinstance(value, tuple) or len(value) != len(shape.elements):
            return f"expected a tuple of {len(shape.elements)}, got {type(value).__name__}"
        for s, v in zip(shape.elements, value):
            problem = _mismatch(s, v, check_dims)
            if problem:
                return problem
        return None
    if isinstance(shape, TokenShape):
        return None if value is TOKEN else f"expected a token, got {type(value).__name__}"
    assert isinstance(shape, ArrayShape)
    if not isinstance(value, np.ndarray):
        return f"expected a numpy array, got {type(value).__name__}"
    if value.dtype != shape.dtype.numpy:
        return f"dtype {value.dtype}, expected {shape.dtype.numpy}"
    if check_dims and value.shape != tuple(shape.dims):
        return f"dimensions {value.shape}, expected {tuple(shape.dims)}"
    return None


def is_elementwise_computation(comp: HloComputation) -> bool:
    """True when `comp` can be evaluated with `Interpreter.call_batched`: all ops elementwise,
    structural, a scalar-to-scalar broadcast (an identity per batch element, which XLA's
    TopK comparators contain) or a call of such a computation; a broadcast that adds dimensions
    is not elementwise."""
    structural = ("parameter", "constant", "tuple", "get-tuple-element")
    return all(i.opcode in structural or _is_scalar_broadcast(i) or _is_elementwise_call(i)
               or op_info(i.opcode).elementwise and not i.called_computations()
               for i in comp.instructions)


def _is_elementwise_call(inst: HloInstruction) -> bool:
    """A `call` or `fusion` of an elementwise computation (XLA's fused reducers: an argmax's
    comparator as a kLoop fusion of scalars), which runs batched as its body does."""
    if inst.opcode not in ("call", "fusion"):
        return False
    called = inst.called_computations()
    return len(called) == 1 and called[0] is not inst.parent and is_elementwise_computation(called[0])


def _is_scalar_broadcast(inst: HloInstruction) -> bool:
    """A `broadcast` of a rank-0 array to a rank-0 array (dimensions={})."""
    return (inst.opcode == "broadcast" and isinstance(inst.shape, ArrayShape) and not inst.shape.dims
            and isinstance(inst.operands[0].shape, ArrayShape) and not inst.operands[0].shape.dims)


# ---- module entry point ---------------------------------------------------------------------
def _bind_argument(shape: Shape, value: Any, where: str) -> Value:
    if isinstance(shape, TupleShape):
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.elements):
            raise InputError(f"{where}: expected a tuple of {len(shape.elements)} arrays for {shape}")
        return tuple(_bind_argument(s, v, f"{where}[{i}]") for i, (s, v) in enumerate(zip(shape.elements, value)))
    if isinstance(shape, TokenShape):
        return TOKEN
    assert isinstance(shape, ArrayShape)
    want = shape.dtype.numpy
    if isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic) and not shape.dims:
        value = np.asarray(value).astype(want)  # a Python scalar takes the parameter's type
    arr = np.asarray(value)
    if arr.dtype != want:
        raise InputError(f"{where}: expected element type {shape.dtype.name} ({want}), got {arr.dtype}")
    if arr.shape != tuple(shape.dims):
        raise InputError(f"{where}: expected dimensions {list(shape.dims)} ({shape.to_text(False)}), "
                         f"got {list(arr.shape)}")
    return arr


def flatten(value: Value) -> list[np.ndarray]:
    """The arrays of a Value, tuples flattened depth-first, tokens dropped."""
    if isinstance(value, tuple):
        out: list[np.ndarray] = []
        for v in value:
            out.extend(flatten(v))
        return out
    if value is TOKEN:
        return []
    return [value]


def evaluate(module: HloModule, args: Sequence[Any], denormals: str = "flush") -> list[np.ndarray]:
    """Run the entry computation of `module` on `args` (one per entry parameter), with
    XLA:CPU's denormal semantics (`denormals="flush"`: FTZ/DAZ per op) or IEEE's, which the
    real GPU backend follows as XLA:GPU does by default (`"keep"`).

    Returns the entry result as a list of numpy arrays, tuples flattened depth-first.
    Raises InputError for a wrong number of arguments or a wrong dtype/shape, and
    UnsupportedError (naming the op and instruction) for ops the interpreter cannot run.
    """
    entry = module.entry
    if entry is None:
        raise HloError(f"module {module.name} has no entry computation")
    params = entry.parameters
    if len(args) != len(params):
        raise InputError(f"module {module.name} takes {len(params)} arguments, got {len(args)}")
    bound = [_bind_argument(p.shape, a, f"argument {i} ({p.name})") for i, (p, a) in enumerate(zip(params, args))]
    result = Interpreter(module, denormals=denormals).call(entry, bound)
    return [np.array(a, copy=True) for a in flatten(result)]
