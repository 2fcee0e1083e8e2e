"""StableHLO import details: constants of every element type (hand-written MLIR, values
derived by hand), bytecode input, names, and errors that name the op and its location."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from hlofuse.frontends.stablehlo import StableHloImportError, from_stablehlo
from hlofuse.hlo.errors import HloError, UnsupportedError
from hlofuse.runtime.interpreter import evaluate


def constant_module(mlir_type: str, dense: str) -> str:
    return f"""
module @m {{
  func.func public @main() -> tensor<{mlir_type}> {{
    %c = stablehlo.constant dense<{dense}> : tensor<{mlir_type}>
    return %c : tensor<{mlir_type}>
  }}
}}"""


def constant_value(mlir_type: str, dense: str) -> np.ndarray:
    module = from_stablehlo(constant_module(mlir_type, dense))
    (const,) = [i for i in module.entry.instructions if i.opcode == "constant"]
    return const.literal


CASES = [
    ("2xi1", "[true, false]", np.array([True, False])),
    ("3xi8", "[-128, 0, 127]", np.array([-128, 0, 127], np.int8)),
    ("2xui8", "[0, 255]", np.array([0, 255], np.uint8)),
    ("2xi16", "[-2, 3]", np.array([-2, 3], np.int16)),
    ("2xui16", "[65535, 1]", np.array([65535, 1], np.uint16)),
    ("2xi32", "[-7, 7]", np.array([-7, 7], np.int32)),
    ("2xui32", "[4294967295, 0]", np.array([4294967295, 0], np.uint32)),
    ("2xi64", "[-9223372036854775808, 5]", np.array([-2 ** 63, 5], np.int64)),
    ("2xui64", "[18446744073709551615, 5]", np.array([2 ** 64 - 1, 5], np.uint64)),
    ("3xf16", "[1.5, -2.0, 0x7C00]", np.array([1.5, -2.0, np.inf], np.float16)),
    ("3xbf16", "[1.5, -2.0, 0x7FC0]", np.array([1.5, -2.0, np.nan], ml_dtypes.bfloat16)),
    ("2xf32", "[0.25, -3.0]", np.array([0.25, -3.0], np.float32)),
    ("2xf64", "[0.1, 1.0E+300]", np.array([0.1, 1e300], np.float64)),
    ("2xcomplex<f32>", "[(1.0,2.0), (-0.5,0x7F800000)]", np.array([1 + 2j, complex(-0.5, np.inf)], np.complex64)),
    ("complex<f64>", "(0.5,-1.5)", np.array(0.5 - 1.5j, np.complex128)),
    ("2x2xf32", "1.0", np.ones((2, 2), np.float32)),  # splat
    ("2x2xbf16", "-2.5", np.full((2, 2), -2.5, ml_dtypes.bfloat16)),  # splat through the text path
    ("2xf32", '"0x0000803F000000C0"', np.array([1.0, -2.0], np.float32)),  # hex: raw little-endian bytes
    ("2xbf16", '"0x803F00C0"', np.array([1.0, -2.0], ml_dtypes.bfloat16)),
    ("2xcomplex<f32>", '"0x0000803F000000C000004040000080C0"', np.array([1 - 2j, 3 - 4j], np.complex64)),
    ("2xi1", '"0x0100"', np.array([True, False])),
    ("2xf8E4M3FN", "[1.0, -2.0]", np.array([1.0, -2.0], ml_dtypes.float8_e4m3fn)),
]


@pytest.mark.parametrize("mlir_type,dense,want", CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_constants_of_every_element_type(mlir_type, dense, want):
    got = constant_value(mlir_type, dense)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "fc" or want.dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        np.testing.assert_array_equal(got.astype(np.complex128), want.astype(np.complex128))
    else:
        np.testing.assert_array_equal(got, want)


def test_large_constants_come_back_exactly():
    x = np.random.default_rng(1).standard_normal((20, 20)).astype(ml_dtypes.bfloat16)
    z = (np.random.default_rng(2).standard_normal((30,)) + 1j).astype(np.complex64)
    text = jax.jit(lambda: (jnp.asarray(x), jnp.asarray(z))).lower().as_text()
    got = evaluate(from_stablehlo(text), [])
    np.testing.assert_array_equal(got[0].view(np.uint16), x.view(np.uint16))
    np.testing.assert_array_equal(got[1], z)


def test_bytecode_and_portable_artifact():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    exported = jax.export.export(jax.jit(lambda a: jnp.sin(a) * 2))(jax.ShapeDtypeStruct(x.shape, x.dtype))
    want = np.sin(x) * 2
    # Portable artifact (VHLO bytecode), as JAX serializes it.
    portable = exported.mlir_module_serialized
    assert isinstance(portable, (bytes, bytearray))
    np.testing.assert_allclose(evaluate(from_stablehlo(portable), [x])[0], want, rtol=1e-6)
    # Plain MLIR bytecode.
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        module = ir.Module.parse(exported.mlir_module())
        import io

        buf = io.BytesIO()
        module.operation.write_bytecode(buf)
    np.testing.assert_allclose(evaluate(from_stablehlo(buf.getvalue()), [x])[0], want, rtol=1e-6)


def test_names_are_readable():
    text = jax.jit(lambda a: jnp.exp(a) + jnp.exp(a * 2)).lower(np.ones(3, np.float32)).as_text()
    module = from_stablehlo(text)
    names = [i.name for i in module.entry.instructions]
    assert "exponential" in names and "add" in names and "multiply" in names
    assert len(set(names)) == len(names)
    assert all(n.count(".") <= 1 for n in names)


CUSTOM_CALL = """
module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.custom_call @my_kernel(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""


def test_custom_call_is_a_clear_unsupported_error():
    with pytest.raises(UnsupportedError) as info:
        from_stablehlo(CUSTOM_CALL, filename="kernel.mlir")
    msg = str(info.value)
    assert "@my_kernel" in msg and "stablehlo.custom_call" in msg and "kernel.mlir:4:" in msg


def test_op_without_counterpart_names_itself_and_its_location():
    text = """
module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<ui32>) {
    %t = stablehlo.partition_id : tensor<ui32>
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
    return %0, %t : tensor<4xf32>, tensor<ui32>
  }
}"""
    with pytest.raises(UnsupportedError, match=r"f\.mlir:4:\d+: stablehlo\.partition_id: hlofuse cannot import this op"):
        from_stablehlo(text, filename="f.mlir")


def test_syntax_error_and_missing_entry():
    with pytest.raises(StableHloImportError, match=r"^<string>:1:\d+: error: "):
        from_stablehlo("module { func.func @main( }")
    with pytest.raises(StableHloImportError, match="no function @nope"):
        from_stablehlo(CUSTOM_CALL, entry="nope")
    assert issubclass(StableHloImportError, HloError)


def test_dynamic_shapes_need_refinement():
    text = """
module @m {
  func.func public @main(%arg0: tensor<?xf32>) -> tensor<?xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<?xf32>
    return %0 : tensor<?xf32>
  }
}"""
    with pytest.raises(UnsupportedError, match="dynamic shape"):
        from_stablehlo(text)


def test_sharding_annotation_is_the_value_on_one_device():
    text = """
module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{replicated}"} : (tensor<4xf32>) -> tensor<4xf32>
    %1 = stablehlo.negate %0 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""
    module = from_stablehlo(text)
    assert [i.opcode for i in module.entry.instructions] == ["parameter", "negate"]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(evaluate(module, [x])[0], -x)


def test_tokens():
    text = """
module @m {
  func.func public @main(%arg0: !stablehlo.token, %arg1: tensor<2xf32>) -> (!stablehlo.token, tensor<2xf32>) {
    %t = stablehlo.create_token : !stablehlo.token
    %t2 = stablehlo.after_all %arg0, %t : !stablehlo.token
    return %t2, %arg1 : !stablehlo.token, tensor<2xf32>
  }
}"""
    module = from_stablehlo(text)
    assert str(module.entry.parameters[0].shape) == "token[]"
    assert [i.opcode for i in module.entry.instructions].count("after-all") == 2
    assert str(module.entry.root.shape).startswith("(token[], f32[2]")


def test_map_composite_and_batch_norm():
    text = """
module @m {
  func.func public @main(%x: tensor<2x3xf32>, %s: tensor<3xf32>, %o: tensor<3xf32>)
      -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<3xf32>) {
    %m = "stablehlo.map"(%x, %x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %p = stablehlo.multiply %a, %b : tensor<f32>
      stablehlo.return %p : tensor<f32>
    }) {dimensions = array<i64: 0, 1>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %c = stablehlo.composite "my.double" %x {decomposition = @double} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %n, %mean, %var = "stablehlo.batch_norm_training"(%x, %s, %o) {epsilon = 0.5 : f32, feature_index = 1 : i64}
        : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
    return %m, %c, %n, %mean : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<3xf32>
  }
  func.func private @double(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %r = stablehlo.add %a, %a : tensor<2x3xf32>
    return %r : tensor<2x3xf32>
  }
}"""
    module = from_stablehlo(text)
    assert {"map", "batch-norm-training"} <= {i.opcode for i in module.entry.instructions}
    x = np.array([[1, 2, 3], [5, 0, -1]], np.float32)
    s = np.array([1, 2, 3], np.float32)
    o = np.array([0, 1, 0], np.float32)
    squared, doubled, normed, mean = evaluate(module, [x, s, o])
    np.testing.assert_array_equal(squared, x * x)
    np.testing.assert_array_equal(doubled, x + x)
    # Per feature (column): mean (3, 1, 1), variance (4, 1, 4); (x - mean) / sqrt(var + 0.5) * s + o.
    np.testing.assert_allclose(mean, [3, 1, 1])
    want = (x - [3, 1, 1]) / np.sqrt(np.array([4, 1, 4]) + 0.5) * s + o
    np.testing.assert_allclose(normed, want, rtol=1e-6)


def test_error_names_the_jax_op():
    def f(x):
        return jnp.linalg.cholesky(x)  # a LAPACK custom call on CPU

    text = jax.jit(f).lower(np.eye(3, dtype=np.float32)).as_text(debug_info=True)
    with pytest.raises(UnsupportedError) as info:
        from_stablehlo(text)
    msg = str(info.value)
    assert "stablehlo.custom_call (cholesky)" in msg and "@lapack_spotrf_ffi is not supported" in msg


def test_metadata_names_the_jax_op_and_source_line():
    text = jax.jit(lambda v: jnp.sin(v) * 2).lower(np.ones(3, np.float32)).as_text(debug_info=True)
    module = from_stablehlo(text)
    (sine,) = [i for i in module.entry.instructions if i.opcode == "sine"]
    meta = str(sine.attrs["metadata"])
    assert 'op_name="jit(<lambda>)/sin"' in meta and "source_line=" in meta
    from hlofuse.hlo.parser import parse_hlo

    reparsed = parse_hlo(module.to_text())
    assert str(reparsed.entry.instruction("sine").attrs["metadata"]) == meta


# StableHLO ops the importer has no rule for, and why. Every op of the dialect either has a
# rule or is listed here (the test below fails when jaxlib's dialect gains an op).
NOT_IMPORTED = {
    **{op: "multi-device collective: hlofuse compiles for one device" for op in (
        "all_gather", "all_reduce", "all_to_all", "collective_broadcast", "collective_permute",
        "cross-replica-sum", "reduce_scatter", "replica_id", "partition_id", "async_start", "async_done")},
    **{op: "host/device communication" for op in ("infeed", "outfeed", "send", "recv")},
    **{op: "dynamic shapes: refine them first (from_exported with concrete arguments)" for op in (
        "dynamic_broadcast_in_dim", "dynamic_conv", "dynamic_gather", "dynamic_iota", "dynamic_pad",
        "dynamic_reshape", "real_dynamic_slice", "set_dimension_size")},
    **{op: "legacy op that JAX never emits" for op in ("einsum", "unary_einsum", "torch_index_select")},
    **{op: "quantized types have no HLO counterpart" for op in ("uniform_quantize", "uniform_dequantize")},
    "return": "a region terminator, handled by the walk",
}


def test_every_stablehlo_op_is_imported_or_listed():
    from jax._src.lib.mlir.dialects import hlo

    from hlofuse.frontends.stablehlo_ops import rule_for

    names = {getattr(getattr(hlo, n), "OPERATION_NAME", None) for n in dir(hlo)}
    ops = {n.split(".", 1)[1] for n in names if n and n.startswith("stablehlo.")}
    missing = {op for op in ops if rule_for("stablehlo." + op) is None}
    assert missing == set(NOT_IMPORTED), (missing - set(NOT_IMPORTED), set(NOT_IMPORTED) - missing)


def test_constants_hoisted_out_of_regions_are_copied_in():
    text = """
module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<f32> {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %two = stablehlo.constant dense<2.0> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %zero) across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
     reducer(%a: tensor<f32>, %b: tensor<f32>) {
      %s = stablehlo.multiply %b, %two : tensor<f32>
      %t = stablehlo.add %a, %s : tensor<f32>
      stablehlo.return %t : tensor<f32>
    }
    return %0 : tensor<f32>
  }
}"""
    module = from_stablehlo(text)
    body = [c for c in module.computations if c is not module.entry][0]
    assert "constant" in {i.opcode for i in body.instructions}
    x = np.array([1, 2, 3, 4], np.float32)
    assert evaluate(module, [x])[0] == 20.0


def test_test_suite_checks_compute_nothing():
    text = """
module @m {
  func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.abs %arg0 : tensor<2xf32>
    stablehlo.custom_call @check.expect_close(%0, %arg0) {has_side_effect = true} : (tensor<2xf32>, tensor<2xf32>) -> ()
    return %0 : tensor<2xf32>
  }
}"""
    module = from_stablehlo(text)
    assert [i.opcode for i in module.entry.instructions] == ["parameter", "abs"]


def test_a_syntax_error_names_the_file_line_and_column_with_a_caret():
    """MLIR's parser reports `"-":3:29` for text; the error names the file and shows the line
    with a caret under the column, as HLO text's errors do (and is an HloParseError)."""
    from hlofuse.hlo.errors import HloParseError

    text = ("module {\n func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>\n  return %0 : tensor<4xf32>\n }\n}\n")
    with pytest.raises(HloParseError) as err:
        from_stablehlo(text, filename="bad.mlir")
    lines = str(err.value).splitlines()
    assert lines[0] == "bad.mlir:3:29: error: use of undeclared SSA value name"
    assert lines[1] == "  %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>"
    assert lines[2] == " " * 28 + "^" and lines[1][28:33] == "%arg1"
    assert isinstance(err.value, StableHloImportError)
