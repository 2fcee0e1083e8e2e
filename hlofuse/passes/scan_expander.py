"""XLA's ScanExpander: a `scan` becomes a while loop over the scan dimension, for the compiled
backends (the interpreter runs `scan` itself, runtime/interpreter/control_flow.py, so that it
stays the oracle of this rewrite).

    scan(inputs..., inits...), dimensions={d}, num_carries=C, is_reverse=R, to_apply=f
      -> while over the state (i: s64[], carries..., inputs..., stacked outputs...):
           condition: i < N                      (N: the inputs' length along d)
           body:      k = R ? N - 1 - i : i
                      (outs..., carries'...) = call(slice_k(inputs)..., carries...), to_apply=f
                      outputs' slices k := outs; i := i + 1
         result: (the stacked outputs..., the last carries...)

Each input's slice at k is a dynamic-slice of extent 1 along d reshaped without d; each output
is written back with a dynamic-update-slice of its value reshaped to extent 1 along d. The
stacked outputs start as zeros (every slice is written before the loop ends). The body's call
is inlined by the call-inliner, which runs after this pass, so fusion sees the body whole.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..hlo.dtypes import S64
from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import TupleShape, array, scalar
from ..hlo.walk import post_order
from .op_expander import OpExpander
from .simplifier_base import new_scalar_constant, splat

_INDEX = scalar("s64")


def _op(opcode: str, shape, *operands: HloInstruction, **attrs) -> HloInstruction:
    """A new, unattached instruction."""
    return HloInstruction(opcode, shape, operands, attrs, name=opcode)


def _index(value: int) -> HloInstruction:
    return new_scalar_constant(S64, value)


def _gte(tuple_value: HloInstruction, index: int) -> HloInstruction:
    return _op("get-tuple-element", tuple_value.shape.elements[index], tuple_value, index=index)


def _computation(module: HloModule, name: str, state, build) -> HloComputation:
    """A computation of one parameter of shape `state` whose root `build(parameter)` returns,
    built unattached: its instructions are added operands first (a walk from the root)."""
    comp = HloComputation(name)
    module.add_computation(comp)
    param = comp.add_parameter(state, "loop_state")
    root = build(param)
    for inst in post_order([root], lambda i: i.operands):
        if inst.parent is None:
            comp.add_instruction(inst)
    comp.root = root
    return comp


class _Expansion:
    """The condition, body and loop of one scan."""

    def __init__(self, scan: HloInstruction) -> None:
        self.scan = scan
        self.carries = int(scan.attrs["num_carries"])
        self.d = int(scan.attrs["dimensions"][0])
        self.reverse = bool(scan.attrs.get("is_reverse", False))
        self.inputs = scan.operands[:len(scan.operands) - self.carries]
        self.inits = scan.operands[len(scan.operands) - self.carries:]
        elements = scan.shape.elements
        self.outputs = list(elements[:len(elements) - self.carries])
        self.length = self.inputs[0].shape.dims[self.d]
        self.state = TupleShape((_INDEX, *(i.shape for i in self.inits), *(x.shape for x in self.inputs),
                                 *self.outputs))

    def _starts(self, at: HloInstruction, rank: int) -> list[HloInstruction]:
        """Start indices of a slice at `at` along the scan dimension (zeros elsewhere)."""
        zero = _index(0)
        return [at if k == self.d else zero for k in range(rank)]

    def condition(self, module: HloModule) -> HloComputation:
        """state -> state.i < N."""
        return _computation(module, f"{self.scan.name}_condition", self.state,
                            lambda state: _op("compare", scalar("pred"), _gte(state, 0), _index(self.length),
                                              direction="LT"))

    def body(self, module: HloModule) -> HloComputation:
        """One step: slice the inputs at k, call to_apply, store its outputs at k."""
        return _computation(module, f"{self.scan.name}_body", self.state, self._step)

    def _step(self, state: HloInstruction) -> HloInstruction:
        c, n_in = len(self.inits), len(self.inputs)
        i = _gte(state, 0)
        carries = [_gte(state, 1 + j) for j in range(c)]
        inputs = [_gte(state, 1 + c + j) for j in range(n_in)]
        stacked = [_gte(state, 1 + c + n_in + j) for j in range(len(self.outputs))]
        k = _op("subtract", _INDEX, _index(self.length - 1), i) if self.reverse else i
        slices = []
        for x in inputs:
            dims = x.shape.dims
            sizes = tuple(1 if a == self.d else n for a, n in enumerate(dims))
            piece = _op("dynamic-slice", array(x.shape.dtype, sizes), x, *self._starts(k, len(dims)),
                        dynamic_slice_sizes=sizes)
            slices.append(_op("reshape", array(x.shape.dtype, dims[:self.d] + dims[self.d + 1:]), piece))
        f = self.scan.attrs["to_apply"]
        call = _op("call", f.root.shape, *slices, *carries, to_apply=f)
        results = [_gte(call, j) for j in range(len(f.root.shape.elements))]
        written = []
        for out, value in zip(stacked, results):
            dims = out.shape.dims
            one = _op("reshape", array(out.shape.dtype, dims[:self.d] + (1,) + dims[self.d + 1:]), value)
            written.append(_op("dynamic-update-slice", out.shape, out, one, *self._starts(k, len(dims))))
        nxt = _op("add", _INDEX, i, _index(1))
        return _op("tuple", self.state, nxt, *results[len(self.outputs):], *inputs, *written)

    def loop(self, module: HloModule) -> HloInstruction:
        """The while loop and the scan's result taken from its final state (unattached)."""
        init = _op("tuple", self.state, _index(0), *self.inits, *self.inputs, *(splat(out, 0) for out in self.outputs))
        loop = _op("while", self.state, init, condition=self.condition(module), body=self.body(module))
        c, n_in = len(self.inits), len(self.inputs)
        parts = [_gte(loop, 1 + c + n_in + j) for j in range(len(self.outputs))]
        parts += [_gte(loop, 1 + j) for j in range(c)]
        return _op("tuple", self.scan.shape, *parts)


@dataclass(frozen=True)
class ScanExpander(OpExpander):
    """Rewrite every scan of the module's computations into a while loop (module docstring).
    Linear in the module's instructions; each scan adds a body of O(inputs + outputs) ops."""

    name: ClassVar[str] = "scan-expander"

    def matches(self, inst: HloInstruction) -> bool:
        """A scan."""
        return inst.opcode == "scan"

    def expand(self, inst: HloInstruction, run: dict) -> HloInstruction:
        """Its while loop (the loop's instructions added unattached; the rewriter adds them)."""
        return _Expansion(inst).loop(inst.parent.parent)
