"""What the StableHLO importer reads once per distinct MLIR attribute (ContextState.attr_values:
integer arrays, small constants) gives each instruction its own, correct value, also when
imports share the context; a root tuple of many values is wired as the constructor wires it.

Expected values are written out from the StableHLO text below (numpy for the computation)."""
from __future__ import annotations

import numpy as np

from hlofuse import from_stablehlo
from hlofuse.frontends import stablehlo_mlir
from hlofuse.runtime.interpreter import evaluate

_TEXT = """
func.func @main(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %c = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %d = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %cb = stablehlo.broadcast_in_dim %c, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %db = stablehlo.broadcast_in_dim %d, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %t = stablehlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %s = stablehlo.add %x, %cb : tensor<2x3xf32>
  return %t, %s, %db : tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}
"""


def _constants(module):
    return [i for c in module.computations for i in c.instructions if i.opcode == "constant"]


def test_equal_constants_get_their_own_arrays():
    module = from_stablehlo(_TEXT)
    a, b = _constants(module)
    assert a.literal is not b.literal
    np.testing.assert_array_equal(a.literal, [1.0, 2.0, 3.0])
    a.literal[0] = 99.0  # an edit of one instruction's literal (as a pass might make) ...
    np.testing.assert_array_equal(b.literal, [1.0, 2.0, 3.0])  # ... leaves the other alone
    again = from_stablehlo(_TEXT)  # the same context: read from its cache
    assert stablehlo_mlir.context_state().attr_values
    for inst in _constants(again):
        np.testing.assert_array_equal(inst.literal, [1.0, 2.0, 3.0])
        assert inst.literal.dtype == np.float32


def test_cached_attributes_give_each_op_its_dimensions():
    for _ in range(2):  # the second import reads the attributes from the context's cache
        module = from_stablehlo(_TEXT)
        insts = {i.opcode: i for c in module.computations for i in c.instructions}
        assert insts["transpose"].attrs["dimensions"] == (1, 0)
        assert insts["broadcast"].attrs["dimensions"] == (1,)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        t, s, d = evaluate(module, [x])
        np.testing.assert_array_equal(t, x.T)
        np.testing.assert_array_equal(s, x + [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(d, np.broadcast_to([1.0, 2.0, 3.0], (2, 3)))


def test_a_root_tuple_of_many_values_lists_each_user_once():
    n = 300
    outs = ", ".join(["%x"] * n + ["%y"])
    types = ", ".join(["tensor<f32>"] * (n + 1))
    text = (f"func.func @main(%x: tensor<f32>) -> ({types}) {{\n"
            f"  %y = stablehlo.negate %x : tensor<f32>\n"
            f"  return {outs} : {types}\n}}\n")
    module = from_stablehlo(text)
    root = module.entry.root
    x = module.entry.parameters[0]
    assert root.opcode == "tuple" and len(root.operands) == n + 1
    assert root.operands[:n] == [x] * n
    assert sum(1 for u in x.users if u is root) == 1 and list(root.operands[n].users) == [root]
    outputs = evaluate(module, [np.float32(2.0)])
    assert len(outputs) == n + 1 and float(outputs[-1]) == -2.0
