"""The op registry: one row per HLO opcode, the only list of opcodes in hlofuse.

A row says what the opcode is (arity, kind, whether it is elementwise, expensive, side
effecting, how it takes part in fusion, its math name and test domain). The stages that give
an opcode meaning attach their rule to its row through `register_*`:

  hlo/shape_inference_*.py  -> shape_rule(inst) -> Shape         (verifier)
  runtime/interpreter/      -> reference(inst, operand values, ctx) -> value   (numpy oracle)
  emitters/elemental_*.py   -> elemental(...)                     (element generators)
  runtime/library_*.py      -> library(inst, operand values, program) -> value (compiled backends)

so every consumer reads one table, and `tests/hlo/test_registry.py` checks that every row has
each rule or says explicitly why it is unsupported. The rule modules are imported by
`hlo/rule_loader.load_rules(stage)`, in the order listed there; each stage's consumer calls it
before reading its rules. A slot is filled once: registering a second rule for it is an error.

Facts that depend on the instruction are row fields too, written as small functions in
`hlo/op_conditions.py`: `expensive_rule` (XLA's shape- and target-dependent IsExpensive cases)
and `fold` (when constant folding may evaluate the instruction with its reference rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from . import op_conditions as cond

VARIADIC = -1


class UnknownOpcodeError(ValueError):
    """Raised for an opcode that is not in the registry."""


@dataclass
class OpInfo:
    """Everything hlofuse knows about one opcode."""

    name: str
    arity: int  # number of operands, or VARIADIC
    kind: str  # unary | binary | ternary | compare | data | reduce | control | collective | io | other
    elementwise: bool = False
    expensive: bool = False  # XLA's IsExpensive: not duplicated into several consumers
    side_effecting: bool = False
    # How the op takes part in loop/input fusion:
    #   "yes"       any position in a fusion
    #   "root"      only as the hero/root of an input fusion (reduce)
    #   "never"     stays unfused (library calls, control flow, side effects)
    fusion: str = "never"
    math: str = ""  # the math function the emitters call ("exp", "log", ...)
    # Inputs of the numeric tests generated from the rows (tests/emitters/test_op_table_numeric.py):
    # any|positive|unit|at_least_one|nonzero|int
    domain: str = "any"
    called: tuple[str, ...] = ()  # attribute names holding called computations
    bookkeeping: bool = False  # only names or regroups buffers (tuples, get-tuple-element, bitcast): no kernel
    # XLA's IsExpensive where it depends on the instruction: (inst, fusion TargetParams) -> bool,
    # read instead of `expensive` for array-shaped instructions.
    expensive_rule: Callable[[Any, Any], bool] | None = None
    # Why the op stays out of loop fusions, where XLA's reason is more specific than the
    # `fusion` category: completes "NAME is ..." in fusion decisions.
    never_fused_why: str = ""
    # Constant folding: (inst, operand values) -> whether evaluating `inst` with its reference
    # rule gives what every backend computes; None: never folded.
    fold: Callable[[Any, list], bool] | None = None
    # The executors' step for an op that needs no kernel and no library rule:
    # param | const | tuple | gte ("" for every other op).
    step_kind: str = ""
    # What XLA:CPU's flush-to-zero / denormals-are-zero mode does to the op's f32/f64/bf16
    # values: keep | flush | keep-tiny | convert | flush-divisor (runtime/interpreter/denormals.py
    # says what each means; the interpreter applies it, docs/denormals.md has the measurements).
    denormals: str = "keep"
    unsupported: dict[str, str] = field(default_factory=dict)  # stage -> reason
    shape_rule: Callable[..., Any] | None = None
    reference: Callable[..., Any] | None = None
    elemental: Callable[..., Any] | None = None
    library: Callable[..., Any] | None = None  # runtime/library_*.py: unfused op run by a compiled backend

    @property
    def is_variadic(self) -> bool:
        return self.arity == VARIADIC

    @property
    def fits_an_epilogue(self) -> bool:
        """Whether the op may sit in the fused epilogue of a dot or convolution, recomputed per
        output element: it fuses into loops (not never, not only as a root) and reduces no
        window (reduce-window, select-and-scatter)."""
        return self.fusion not in ("never", "root") and self.kind != "reduce"


OPS: dict[str, OpInfo] = {}


def _row(name: str, arity: int, kind: str, **kw) -> None:
    OPS[name] = OpInfo(name, arity, kind, **kw)


def _unary(name: str, expensive: bool = False, math: str = "", domain: str = "any") -> None:
    _row(name, 1, "unary", elementwise=True, expensive=expensive, fusion="yes", math=math, domain=domain)


def _binary(name: str, expensive: bool = False, math: str = "", domain: str = "any") -> None:
    _row(name, 2, "binary", elementwise=True, expensive=expensive, fusion="yes", math=math, domain=domain)


def _set(names: str, **fields: Any) -> None:
    """Set fields of existing rows (the conditional facts that several rows share)."""
    for name in names.split():
        for key, value in fields.items():
            setattr(OPS[name], key, value)


# ---- elementwise unary ------------------------------------------------------------------
for _n in ("abs", "negate", "sign", "not", "ceil", "floor", "round-nearest-afz", "round-nearest-even",
           "is-finite", "real", "imag", "count-leading-zeros", "popcnt", "copy", "bitcast-convert", "convert",
           "reduce-precision"):
    _unary(_n)
_unary("exponential", True, "exp")
_unary("exponential-minus-one", True, "expm1")
_unary("log", True, "log", "positive")
_unary("log-plus-one", True, "log1p", "positive")
_unary("logistic", True, "logistic")
_unary("sqrt", True, "sqrt", "positive")
_unary("rsqrt", True, "rsqrt", "positive")
_unary("cbrt", True, "cbrt")
_unary("tanh", True, "tanh")
# sine, cosine and tan are cheap for real types (XLA: expensive only for complex).
_unary("sine", False, "sin")
_unary("cosine", False, "cos")
_unary("tan", False, "tan", "unit")
_unary("erf", True, "erf")
# XLA's newer elementwise functions (sinh, cosh and the inverse trigonometric and hyperbolic
# ones; XLA:CPU of jaxlib 0.10 parses all but atan and compiles none of them): libm's (libdevice's)
# functions on real types, formulas of them for complex sinh and cosh.
_unary("sinh", True, "sinh")
_unary("cosh", True, "cosh")
_unary("asin", True, "asin", "unit")
_unary("acos", True, "acos", "unit")
_unary("atan", True, "atan")
_unary("asinh", True, "asinh")
_unary("acosh", True, "acosh", "at_least_one")
_unary("atanh", True, "atanh", "unit")

# ---- elementwise binary -----------------------------------------------------------------
for _n in ("add", "subtract", "multiply", "maximum", "minimum", "and", "or", "xor",
           "shift-left", "shift-right-arithmetic", "shift-right-logical", "complex"):
    _binary(_n)
_binary("divide", True, "div", "nonzero")
_binary("remainder", True, "rem", "nonzero")
_binary("power", True, "pow", "positive")
_binary("atan2", True, "atan2")
_row("compare", 2, "compare", elementwise=True, fusion="yes")

# ---- elementwise ternary ----------------------------------------------------------------
_row("select", 3, "ternary", elementwise=True, fusion="yes")
_row("clamp", 3, "ternary", elementwise=True, fusion="yes")
_row("stochastic-convert", 2, "binary", elementwise=True, fusion="yes")

# ---- leaves -----------------------------------------------------------------------------
_row("parameter", 0, "other", expensive=True, fusion="yes", step_kind="param")
_row("constant", 0, "other", fusion="yes", step_kind="const")
_row("iota", 0, "data", fusion="yes")
_row("replica-id", 0, "collective")
_row("partition-id", 0, "collective")

# ---- data movement (fusible) ------------------------------------------------------------
_row("broadcast", 1, "data", fusion="yes")
_row("reshape", 1, "data", fusion="yes")
_row("bitcast", 1, "data", fusion="yes", bookkeeping=True)
_row("transpose", 1, "data", fusion="yes")
_row("slice", 1, "data", fusion="yes")
_row("dynamic-slice", VARIADIC, "data", fusion="yes")
# XLA fuses a dynamic-update-slice anywhere (IsUniversallyLoopFusible); as a fusion's root it
# writes only its window into the operand's buffer (passes/fusion/in_place.py).
_row("dynamic-update-slice", VARIADIC, "data", fusion="yes")
_row("concatenate", VARIADIC, "data", fusion="yes")
_row("pad", 2, "data", fusion="yes")
_row("reverse", 1, "data", fusion="yes")
# XLA's newer shuffle (rotate or permute elements along dimensions; hlo/shuffle.py): the
# compiled backends expand it into slices and concatenates or a gather (passes/shuffle_expander.py)
_row("shuffle", 1, "data")
# XLA fuses a gather anywhere, as the root of a loop fusion too (IsUniversallyLoopFusible,
# the CPU's CanBeLoopFused): its index producers fuse into it.
_row("gather", 2, "data", expensive=True, fusion="yes")
_row("dynamic-reshape", VARIADIC, "data")
_row("get-dimension-size", 1, "data", expensive=True)
_row("set-dimension-size", 2, "data", expensive=True)

# ---- tuples -----------------------------------------------------------------------------
_row("tuple", VARIADIC, "other", fusion="yes", bookkeeping=True, step_kind="tuple")
_row("get-tuple-element", 1, "other", fusion="yes", bookkeeping=True, step_kind="gte")

# ---- reductions and windows -------------------------------------------------------------
_row("reduce", VARIADIC, "reduce", expensive=True, fusion="root", called=("to_apply",))
# A window reduction fuses like data movement (XLA:GPU's IsUniversallyLoopFusible; its element
# generator loops over the window): one input, array-shaped (fusibility._universally_loop_fusible).
# XLA:CPU leaves it unfused; hlofuse's CPU fuses it into consumers by the rule in
# passes/fusion/window_fusion.py.
_row("reduce-window", VARIADIC, "reduce", expensive=True, fusion="yes", called=("to_apply",))
_row("select-and-scatter", 3, "reduce", expensive=True, called=("select", "scatter"))
_row("scatter", VARIADIC, "data", expensive=True, called=("to_apply",),
     never_fused_why="a scatter, which updates its operand in place and only roots a fusion of its own")
_row("map", VARIADIC, "other", elementwise=True, expensive=True, fusion="yes", called=("to_apply",))
_row("sort", VARIADIC, "other", expensive=True, called=("to_apply",),
     never_fused_why="a sort, which runs as a kernel of its own")
_row("topk", 1, "other", expensive=True, called=("to_apply",))

# ---- linear algebra ---------------------------------------------------------------------
_row("dot", 2, "other", expensive=True,
     never_fused_why="a dot, which is never fused into loop fusions (XLA fuses dots only in dedicated fusions)")
_row("ragged-dot", 3, "other", expensive=True,
     never_fused_why="a ragged dot, which is never fused into loop fusions (XLA runs it as a library call)")
_row("convolution", 2, "other", expensive=True,
     never_fused_why="a convolution, which is never fused into loop fusions (XLA fuses convolutions only "
                     "in dedicated fusions)")
_row("fft", 1, "other", expensive=True)
_row("cholesky", 1, "other", expensive=True)
_row("triangular-solve", 2, "other", expensive=True)
_row("batch-norm-training", 3, "other", expensive=True)
_row("batch-norm-inference", 5, "other", expensive=True)
_row("batch-norm-grad", 5, "other", expensive=True)

# ---- control flow -----------------------------------------------------------------------
_row("while", 1, "control", expensive=True, called=("condition", "body"))
_row("conditional", VARIADIC, "control", expensive=True,
     called=("branch_computations", "true_computation", "false_computation"))
_row("call", VARIADIC, "control", expensive=True, called=("to_apply",))
# scan(inputs..., inits...): to_apply over the inputs' slices along `dimensions`, carrying
# num_carries values (XLA's kScan; the compiled backends run it as a while loop,
# passes/scan_expander.py, as XLA's ScanExpander does)
_row("scan", VARIADIC, "control", expensive=True, called=("to_apply",))
_row("fusion", VARIADIC, "control", expensive=True, called=("calls",))
_row("custom-call", VARIADIC, "other", expensive=True, side_effecting=True, called=("called_computations",))
_row("opt-barrier", 1, "other")
_row("add-dependency", 2, "other", expensive=True)
_row("after-all", VARIADIC, "other", expensive=True)
_row("domain", 1, "other", expensive=True)

# ---- random numbers ---------------------------------------------------------------------
_row("rng", VARIADIC, "other", expensive=True, side_effecting=True)
_row("rng-bit-generator", 1, "other", expensive=True)
_row("rng-get-and-update-state", 0, "other", expensive=True, side_effecting=True)

# ---- i/o, collectives and async ---------------------------------------------------------
for _n in ("infeed", "outfeed", "send", "send-done", "recv", "recv-done"):
    _row(_n, VARIADIC, "io", expensive=_n not in ("infeed", "outfeed"), side_effecting=True)
for _n in ("all-reduce", "all-reduce-start", "all-reduce-done", "all-gather", "all-gather-start",
           "all-gather-done", "all-to-all", "ragged-all-to-all", "reduce-scatter", "collective-broadcast",
           "collective-permute", "collective-permute-start", "collective-permute-done"):
    _row(_n, VARIADIC, "collective", expensive=True, side_effecting=True, called=("to_apply",))
for _n in ("async-start", "async-update", "async-done", "copy-start", "copy-done"):
    _row(_n, VARIADIC, "other", expensive=_n.startswith("async"), side_effecting=True, called=("calls",))

# ---- facts that depend on the instruction (functions in op_conditions.py) ----------------------
_set("abs sign tan", expensive_rule=cond.expensive_if_complex)
_set("sine cosine", expensive_rule=cond.expensive_trigonometry)
_set("divide remainder", expensive_rule=cond.expensive_unless_cheap_division)
_set("sqrt rsqrt exponential", expensive_rule=cond.expensive_unless_gpu_f32)
_set("convert", expensive_rule=cond.expensive_cpu_f32_to_bf16)

# Denormals (XLA:CPU runs with FTZ/DAZ; every other row keeps them: it moves or selects bits, or
# its called computation does the arithmetic).
_set("add subtract multiply divide maximum minimum power atan2 compare clamp sign ceil floor "
     "round-nearest-afz round-nearest-even exponential log log-plus-one logistic sqrt rsqrt cbrt "
     "cosine erf dot convolution fft cholesky triangular-solve batch-norm-training "
     "batch-norm-inference batch-norm-grad", denormals="flush")
_set("sine tan tanh exponential-minus-one", denormals="keep-tiny")
_set("convert", denormals="convert")
_set("remainder", denormals="flush-divisor")

_set("add subtract", fold=cond.fold_add_sub)
_set("multiply", fold=cond.fold_multiply)
_set("divide", fold=cond.fold_divide)
_set("negate", fold=cond.fold_negate)
_set("abs", fold=cond.fold_abs)
_set("maximum minimum", fold=cond.fold_max_min)
_set("and or xor not", fold=cond.fold_bitwise)
_set("compare", fold=cond.fold_compare)
_set("convert", fold=cond.fold_convert)
_set("select reshape transpose slice concatenate reverse pad", fold=cond.always)


def op_info(opcode: str) -> OpInfo:
    """The registry row of `opcode`; UnknownOpcodeError names the opcode if there is none."""
    try:
        return OPS[opcode]
    except KeyError:
        raise UnknownOpcodeError(f"unknown HLO opcode '{opcode}'") from None


def is_known(opcode: str) -> bool:
    """Whether `opcode` has a registry row."""
    return opcode in OPS


class RegistrationError(RuntimeError):
    """A rule registered for a slot that is already filled (or marked unsupported)."""


# stage name (as in `unsupported` and rule_loader.RULE_MODULES) -> OpInfo slot
SLOTS = {"shape": "shape_rule", "reference": "reference", "elemental": "elemental", "library": "library"}


def _describe(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _registrar(stage: str) -> Callable[..., Callable[[Callable], Callable]]:
    slot = SLOTS[stage]

    def register(*opcodes: str) -> Callable[[Callable], Callable]:
        def deco(fn: Callable) -> Callable:
            for opcode in opcodes:
                info = op_info(opcode)
                old = getattr(info, slot)
                if old is not None:
                    raise RegistrationError(f"{opcode}: a second {stage} rule {_describe(fn)} "
                                            f"(already {_describe(old)})")
                if stage in info.unsupported:
                    raise RegistrationError(f"{opcode}: {stage} rule {_describe(fn)} for an opcode marked "
                                            f"unsupported ({info.unsupported[stage]})")
                setattr(info, slot, fn)
            return fn

        return deco

    register.__doc__ = f"Decorator attaching a {stage} rule to the rows of `opcodes` (each slot once)."
    return register


register_shape_rule = _registrar("shape")
register_reference = _registrar("reference")
register_elemental = _registrar("elemental")
register_library = _registrar("library")


def mark_unsupported(stage: str, reason: str, *opcodes: str) -> None:
    """Record that `stage` (shape|reference|elemental|library) does not support these opcodes, and why.

    Refused (RegistrationError) for an opcode that has a rule of that stage or a reason already."""
    slot = SLOTS[stage]
    for opcode in opcodes:
        info = op_info(opcode)
        if getattr(info, slot) is not None or stage in info.unsupported:
            raise RegistrationError(f"{opcode}: marked unsupported by {stage} twice, or although it has a rule")
        info.unsupported[stage] = reason


def opcodes_where(predicate: Callable[[OpInfo], bool]) -> list[str]:
    """Names of the opcodes whose row satisfies `predicate` (the way to get an opcode set)."""
    return [name for name, info in OPS.items() if predicate(info)]
