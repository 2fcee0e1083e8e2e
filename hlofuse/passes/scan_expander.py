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

import numpy as np

from ..hlo.ir import HloComputation, HloInstruction, HloModule
from ..hlo.shapes import ArrayShape, TupleShape, array, scalar
from .pass_base import HloPass
from .rewrite import Rewriter

_INDEX = scalar("s64")


def _op(opcode: str, shape, *operands: HloInstruction, **attrs) -> HloInstruction:
    """A new, unattached instruction."""
    return HloInstruction(opcode, shape, operands, attrs, name=opcode)


def _constant(value, shape: ArrayShape) -> HloInstruction:
    """A constant of `value` in `shape`'s element type and dimensions."""
    c = HloInstruction("constant", shape, name="constant")
    c.literal = np.full(shape.dims, value, dtype=shape.dtype.numpy)
    return c


def _gte(tuple_value: HloInstruction, index: int) -> HloInstruction:
    return _op("get-tuple-element", tuple_value.shape.elements[index], tuple_value, index=index)


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

    def _starts(self, at: HloInstruction, rank: int, parts: list) -> list[HloInstruction]:
        """Start indices of a slice at `at` along the scan dimension (zeros elsewhere)."""
        zero = _constant(0, _INDEX)
        parts.append(zero)
        return [at if k == self.d else zero for k in range(rank)]

    def condition(self, module: HloModule) -> HloComputation:
        """state -> state.i < N."""
        comp = HloComputation(f"{self.scan.name}_condition")
        module.add_computation(comp)
        state = comp.add_parameter(self.state, "loop_state")
        i = comp.add_instruction(_gte(state, 0))
        n = comp.add_instruction(_constant(self.length, _INDEX))
        comp.root = comp.add_instruction(_op("compare", scalar("pred"), i, n, direction="LT"))
        return comp

    def body(self, module: HloModule) -> HloComputation:
        """One step: slice the inputs at k, call to_apply, store its outputs at k."""
        comp = HloComputation(f"{self.scan.name}_body")
        module.add_computation(comp)
        state = comp.add_parameter(self.state, "loop_state")
        made: list[HloInstruction] = []

        def add(inst: HloInstruction) -> HloInstruction:
            made.append(inst)
            return inst

        c, n_in = len(self.inits), len(self.inputs)
        i = add(_gte(state, 0))
        carries = [add(_gte(state, 1 + j)) for j in range(c)]
        inputs = [add(_gte(state, 1 + c + j)) for j in range(n_in)]
        stacked = [add(_gte(state, 1 + c + n_in + j)) for j in range(len(self.outputs))]
        k = i
        if self.reverse:
            last = add(_constant(self.length - 1, _INDEX))
            k = add(_op("subtract", _INDEX, last, i))
        zeros: list[HloInstruction] = []
        slices = []
        for x in inputs:
            dims = x.shape.dims
            sizes = tuple(1 if a == self.d else n for a, n in enumerate(dims))
            piece = add(_op("dynamic-slice", array(x.shape.dtype, sizes), x, *self._starts(k, len(dims), zeros),
                            dynamic_slice_sizes=sizes))
            slices.append(add(_op("reshape", array(x.shape.dtype, dims[:self.d] + dims[self.d + 1:]), piece)))
        f = self.scan.attrs["to_apply"]
        call = add(_op("call", f.root.shape, *slices, *carries, to_apply=f))
        results = [add(_gte(call, j)) for j in range(len(f.root.shape.elements))]
        written = []
        for out, value in zip(stacked, results):
            dims = out.shape.dims
            one = add(_op("reshape", array(out.shape.dtype, dims[:self.d] + (1,) + dims[self.d + 1:]), value))
            written.append(add(_op("dynamic-update-slice", out.shape, out, one, *self._starts(k, len(dims), zeros))))
        step = add(_constant(1, _INDEX))
        nxt = add(_op("add", _INDEX, i, step))
        new_carries = results[len(self.outputs):]
        root = _op("tuple", self.state, nxt, *new_carries, *inputs, *written)
        for inst in zeros + made + [root]:
            if inst.parent is None:
                comp.add_instruction(inst)
        comp.root = root
        return comp

    def loop(self, module: HloModule) -> HloInstruction:
        """The while loop and the scan's result taken from its final state (unattached)."""
        init = _op("tuple", self.state, _constant(0, _INDEX), *self.inits, *self.inputs,
                   *(_op("broadcast", out, _constant(0, array(out.dtype, ())), dimensions=()) for out in self.outputs))
        loop = _op("while", self.state, init, condition=self.condition(module), body=self.body(module))
        c, n_in = len(self.inits), len(self.inputs)
        parts = [_gte(loop, 1 + c + n_in + j) for j in range(len(self.outputs))]
        parts += [_gte(loop, 1 + j) for j in range(c)]
        return _op("tuple", self.scan.shape, *parts)


@dataclass(frozen=True)
class ScanExpander(HloPass):
    """Rewrite every scan of the module's computations into a while loop (module docstring).
    Linear in the module's instructions; each scan adds a body of O(inputs + outputs) ops."""

    name: ClassVar[str] = "scan-expander"

    def run(self, module: HloModule) -> bool:
        """Expand every scan; True if there was one."""
        changed = False
        for comp in list(module.computations):
            scans = [i for i in comp.instructions if i.opcode == "scan"]
            if not scans:
                continue
            rewriter = Rewriter(comp)
            for scan in scans:
                rewriter.replace(scan, _Expansion(scan).loop(module))
            rewriter.finish()
            changed = True
        return changed
