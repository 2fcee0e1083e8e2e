"""The op registry: one row per HLO opcode, the only list of opcodes in hlofuse.

A row says what the opcode is (arity, kind, whether it is elementwise, expensive, side
effecting, how it takes part in fusion, its math name and test domain). The stages that give
an opcode meaning attach their rule to its row through `register_*`:

  hlo/shape_inference.py  -> shape_rule(inst) -> Shape         (verifier)
  runtime/interpreter/    -> reference(inst, operand values, ctx) -> value   (numpy oracle)
  emitters/elemental.py   -> elemental(...)                     (element generators)

so every consumer reads one table, and `tests/test_registry.py` checks that every row has
each rule or says explicitly why it is unsupported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

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
    #   "producer"  fused into a consumer but never the hero (gather)
    #   "never"     stays unfused (library calls, control flow, side effects)
    fusion: str = "never"
    math: str = ""  # the math function the emitters call ("exp", "log", ...)
    domain: str = "any"  # input domain for generated numeric tests: any|positive|unit|nonzero|int
    called: tuple[str, ...] = ()  # attribute names holding called computations
    bookkeeping: bool = False  # only names or regroups buffers (tuples, get-tuple-element, bitcast): no kernel
    unsupported: dict[str, str] = field(default_factory=dict)  # stage -> reason
    shape_rule: Callable[..., Any] | None = None
    reference: Callable[..., Any] | None = None
    elemental: Callable[..., Any] | None = None
    library: Callable[..., Any] | None = None  # runtime/library_ops.py: unfused op run by a compiled backend

    @property
    def is_variadic(self) -> bool:
        return self.arity == VARIADIC


OPS: dict[str, OpInfo] = {}


def _row(name: str, arity: int, kind: str, **kw) -> None:
    OPS[name] = OpInfo(name, arity, kind, **kw)


def _unary(name: str, expensive: bool = False, math: str = "", domain: str = "any") -> None:
    _row(name, 1, "unary", elementwise=True, expensive=expensive, fusion="yes", math=math, domain=domain)


def _binary(name: str, expensive: bool = False, math: str = "", domain: str = "any") -> None:
    _row(name, 2, "binary", elementwise=True, expensive=expensive, fusion="yes", math=math, domain=domain)


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
_row("parameter", 0, "other", expensive=True, fusion="yes")
_row("constant", 0, "other", fusion="yes")
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
_row("dynamic-update-slice", VARIADIC, "data", fusion="never")
_row("concatenate", VARIADIC, "data", fusion="yes")
_row("pad", 2, "data", fusion="yes")
_row("reverse", 1, "data", fusion="yes")
_row("gather", 2, "data", expensive=True, fusion="producer")
_row("dynamic-reshape", VARIADIC, "data")
_row("get-dimension-size", 1, "data", expensive=True)
_row("set-dimension-size", 2, "data", expensive=True)

# ---- tuples -----------------------------------------------------------------------------
_row("tuple", VARIADIC, "other", fusion="yes", bookkeeping=True)
_row("get-tuple-element", 1, "other", fusion="yes", bookkeeping=True)

# ---- reductions and windows -------------------------------------------------------------
_row("reduce", VARIADIC, "reduce", expensive=True, fusion="root", called=("to_apply",))
_row("reduce-window", VARIADIC, "reduce", expensive=True, called=("to_apply",))
_row("select-and-scatter", 3, "reduce", expensive=True, called=("select", "scatter"))
_row("scatter", VARIADIC, "data", expensive=True, called=("to_apply",))
_row("map", VARIADIC, "other", elementwise=True, expensive=True, fusion="yes", called=("to_apply",))
_row("sort", VARIADIC, "other", expensive=True, called=("to_apply",))
_row("topk", 1, "other", expensive=True, called=("to_apply",))

# ---- linear algebra ---------------------------------------------------------------------
_row("dot", 2, "other", expensive=True)
_row("ragged-dot", 3, "other", expensive=True)
_row("convolution", 2, "other", expensive=True)
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


def op_info(opcode: str) -> OpInfo:
    """The registry row of `opcode`; UnknownOpcodeError names the opcode if there is none."""
    try:
        return OPS[opcode]
    except KeyError:
        raise UnknownOpcodeError(f"unknown HLO opcode '{opcode}'") from None


def is_known(opcode: str) -> bool:
    return opcode in OPS


def _registrar(slot: str):
    def register(*opcodes: str):
        def deco(fn):
            for opcode in opcodes:
                setattr(op_info(opcode), slot, fn)
            return fn

        return deco

    return register


register_shape_rule = _registrar("shape_rule")
register_reference = _registrar("reference")
register_elemental = _registrar("elemental")
register_library = _registrar("library")


def mark_unsupported(stage: str, reason: str, *opcodes: str) -> None:
    """Record that `stage` (shape|reference|elemental) does not support these opcodes, and why."""
    for opcode in opcodes:
        op_info(opcode).unsupported[stage] = reason


def opcodes_where(predicate: Callable[[OpInfo], bool]) -> list[str]:
    """Names of the opcodes whose row satisfies `predicate` (the way to get an opcode set)."""
    return [name for name, info in OPS.items() if predicate(info)]
