"""Test-wide settings: passes are verified after every compile's pass; hypothesis is derandomized under CI (CI=true), so a CI run is
reproducible; locally every run explores new examples."""
from __future__ import annotations

import atexit
import os

import pytest
import shutil
import sys
import tempfile

from hypothesis import settings

_TESTS = os.path.dirname(os.path.abspath(__file__))
# tests/support holds the shared helper modules (`from xla_oracle import run_on_xla`); tests/ itself
# is on the path for the fuzzing package (`from fuzz.runner import run`).
sys.path.insert(0, _TESTS)
sys.path.insert(0, os.path.join(_TESTS, "support"))

# Python's bytecode cache on, whatever the environment says: a shell that exports
# PYTHONDONTWRITEBYTECODE=1 (this project's machines do) makes every Python process the tests
# start (each xdist worker, the CLI runs, fuzz workers, the fresh processes of the cache tests)
# compile hlofuse's source again, about 0.5 s each on a 2.0 GHz core, and makes pytest rewrite
# every test module's asserts again in each worker. The __pycache__ directories it writes are
# ignored by git. (CLI, cache and fuzz tests, 5 files: 43.3-43.9 s without it, 32.1-33.0 with.)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Every compile in the tests verifies the module after each pass (off by default for users:
# it costs compile time), so a pass that leaves an invalid module fails the test that ran it.
os.environ.setdefault("HLOFUSE_VERIFY_PASSES", "1")

# hlofuse.compile caches kernel object code on disk by default: the tests use a fresh
# directory per session (per xdist worker), never the user's cache, so an entry written by
# another version of the code cannot hide a code generation bug.
_CACHE_DIR = tempfile.mkdtemp(prefix="hlofuse-test-cache-")
os.environ["HLOFUSE_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _module_cache_off_under_monkeypatch(request):
    """A test that patches hlofuse compiles afresh: the module cache's key (module text,
    options, hlofuse's source on disk) cannot see a patch, so an entry from an unpatched
    compile of the same module would be returned, and one written under a patch would be
    returned to later tests. Kernel object entries stay on (their key is the kernel's IR)."""
    if "monkeypatch" in request.fixturenames:
        request.getfixturevalue("monkeypatch").setenv("HLOFUSE_MODULE_CACHE", "0")
    yield


@pytest.fixture
def kernels_at_o3(monkeypatch):
    """Every kernel compiled at O3: codegen/kernel_work.py compiles a kernel of negligible work
    at a cheap level without vector loops, and the small kernels of tests that read what O3
    makes of the emitters' code (vector bodies, interleaving, golden IR) are such kernels."""
    from hlofuse.codegen import kernel_work

    monkeypatch.setattr(kernel_work, "SMALL_KERNEL_NS", 0.0)


# ---- the default run's share of the exhaustive matrices ---------------------------------------
# Each family below (a parametrized test: every op x every type x every backend, every corpus
# file, many seeds) runs a representative subset by default and its whole cross product under
# `-m slow` (`make test-all`). The subset, fixed by collection order (so every xdist worker
# picks the same one): a case is kept when it brings a (parameter, value) not yet kept in its
# family -- every op, every type, every backend, every layout at least once. The parameters
# named with a family are corpus files, seeds or shapes: those are not kept each once but
# thinned to every _STRIDE-th case of the family (the other parameters still each kept once).
# The other cases are marked `slow`, not deleted: `-m slow` runs exactly them.
_STRIDE = 4
_MATRICES = {
    "codegen/test_arg_reduction.py::test_float_rows": (),
    "codegen/test_column_rotation.py::test_bits_equal_the_plain_kernel_at_every_offset": (),
    "codegen/test_conv.py::test_inf_and_nan_weights_on_padding_and_holes": ("case",),
    "codegen/test_conv.py::test_random_f32_convolutions": ("seed",),
    "codegen/test_conv.py::test_random_typed_convolutions": (),
    "codegen/test_conv_blocks.py::test_avx2_blocks_give_the_scalar_loops_bits_and_the_interpreters_results": (),
    "codegen/test_conv_cold_taps.py::test_same_values_and_bits": (),
    "codegen/test_conv_features.py::test_same_bits_as_the_scalar_loop_and_the_interpreters_results": (),
    "codegen/test_conv_gemm.py::test_random_dense_convolutions": ("seed",),
    "codegen/test_conv_gemm_pack.py::test_blocked_packing_matches_rows_and_interpreter": (),
    "codegen/test_conv_rows.py::test_rows_give_the_position_order_bits": (),
    "codegen/test_conv_vector.py::test_vectors_give_the_scalar_loops_bits": (),
    "codegen/test_conv_windows.py::test_conformance_on_cpu": ("name",),
    "codegen/test_conv_windows.py::test_select_and_scatter_kernel": (),
    "codegen/test_dus_in_place.py::test_dus_matches_interpreter": (),
    "codegen/test_extremum_reduction.py::test_extremum_reduction_edges": (),
    "codegen/test_gemm.py::test_random_dimension_numbers": ("seed",),
    "codegen/test_gpu_modules.py::test_benchmark_workloads": ("name",),
    "codegen/test_gpu_modules.py::test_golden_inputs_assemble": ("case",),
    "codegen/test_gpu_modules.py::test_golden_inputs_emulated": ("case",),
    "codegen/test_gpu_modules.py::test_jax_corpus": ("path",),
    "codegen/test_gpu_modules.py::test_xla_fused_corpus_runs_as_given": ("path",),
    "codegen/test_math_calls.py::test_called_math_gives_the_inlined_bits": (),
    "codegen/test_onednn_conv.py::test_random_convolutions": ("seed",),
    "codegen/test_onednn_conv.py::test_random_expressible_convolutions": ("seed",),
    "codegen/test_onednn_matmul.py::test_random_dimension_numbers": ("seed",),
    "codegen/test_reduce_precision_accumulation.py::test_other_reducers_and_inits_match_xla_cpu": (),
    "codegen/test_reduce_precision_accumulation.py::test_sum_matches_xla_cpu_bit_for_bit": (),
    "codegen/test_reduction_epilogue.py::test_epilogue_matches_interpreter": (),
    "codegen/test_rng_kernel.py::test_rng_bit_generator_matches_the_interpreter": (),
    "codegen/test_row_kernels.py::test_row_kernel_matches_interpreter_f32": (),
    "codegen/test_scatter_kernel.py::test_scatter_matches_interpreter": (),
    "codegen/test_sort_kernel.py::test_sort_any_comparator": (),
    "codegen/test_sort_kernel.py::test_sort_several_operands": (),
    "codegen/test_sort_kernel.py::test_sort_simple_comparators": (),
    "codegen/test_sort_kernel.py::test_topk": (),
    "emitters/test_arithmetic_edges.py::test_pred_reductions": (),
    "emitters/test_backend_types.py::test_convert_from_every_pattern": (),
    "emitters/test_backend_types.py::test_unary_ops_on_every_pattern": (),
    "emitters/test_complex_narrow_and_zero_size.py::test_narrow_reduce_window_in_order": (),
    "emitters/test_complex_ops.py::test_complex_compare_matches_xla_on_every_edge_pair": (),
    "emitters/test_denormal_literals.py::test_literal_denormal_as_the_interpreter": (),
    "emitters/test_emitter_edges.py::test_tuple_values_in_fusions": (),
    "emitters/test_math_edges.py::test_binary_signed_zeros_like_interpreter": (),
    "emitters/test_math_edges.py::test_sign_of_zero_kept_like_interpreter": (),
    "emitters/test_math_edges.py::test_sign_of_zero_vs_xla": (),
    "emitters/test_op_table_numeric.py::test_elementwise_row_matches_the_interpreter": (),
    "frontends/test_conformance.py::test_shared_testdata_on_interpreter": ("chunk",),
    "frontends/test_stablehlo_corpus.py::test_corpus_program_through_stablehlo": ("program",),
    "hlo/test_provenance.py::test_fusing_the_pre_fusion_module_is_optimize": ("path",),
    "hlo/test_provenance.py::test_optimizing_the_clone_leaves_the_original_unchanged": ("path",),
    "hlo/test_rng_bit_generator_states.py::test_bit_types_agree_with_xla": (),
    "hlo/test_rng_bit_generator_states.py::test_states_agree_with_xla": (),
    "passes/fusion/test_fusion_differential.py::test_jax_corpus_keeps_results": ("path",),
    "passes/fusion/test_xla_parity.py::test_fused_module_computes_what_the_input_computes": ("pc",),
    "passes/test_pass_validity.py::test_each_fusion_pass_on_colliding_names": (),
    "passes/test_pass_validity.py::test_every_pass_leaves_a_valid_module": ("name", "text"),
    "passes/test_pass_validity.py::test_fusion_pipeline_leaves_valid_modules": (),
    "passes/test_passes.py::test_jax_corpus_is_bit_exact_after_simplifier_cse_dce": ("name",),
    "runtime/interpreter/test_corpus.py::test_corpus_hlo_matches_jax": ("p",),
    "runtime/interpreter/test_interpreter_nan_operands.py::test_nan_operands_pass_through_the_interpreter_and_the_cpu_kernel": (),
    "runtime/interpreter/test_interpreter_ops.py::test_random_convolution_matches_jax": ("seed",),
    "runtime/interpreter/test_interpreter_ops.py::test_rng_bit_generator_is_bit_exact_with_xla": (),
    "runtime/interpreter/test_interpreter_ops_indexing.py::test_random_gather_and_scatter_match_jax": ("seed",),
    "runtime/interpreter/test_interpreter_ops_windows.py::test_random_reduce_window_matches_jax": ("seed",),
    "runtime/interpreter/test_interpreter_signed_zero.py::test_reduce_and_reduce_window_signed_zero_vs_xla": (),
    "runtime/test_cpu_libcalls.py::test_f16_results_match_the_interpreter": (),
    "runtime/test_cpu_runtime.py::test_jax_corpus_against_interpreter": ("path",),
    "runtime/test_io_files.py::test_cli_round_trip": (),
    "runtime/test_rng_bit_generator_shapes.py::test_cpu_matches_interpreter": (),
    "runtime/test_rng_bit_generator_shapes.py::test_interpreter_matches_xla": (),
    "runtime/test_runtime_scalars.py::test_scalars_keep_rank_zero": (),
    "runtime/test_scatter_gather_edges.py::test_compiled_matches_interpreter": (),
    "runtime/test_scatter_gather_edges.py::test_interpreter_matches_xla": (),
    "runtime/test_sort_comparators.py::test_backends_return_the_interpreters_permutation": (),
    "runtime/test_sort_comparators.py::test_interpreter_matches_xla_where_xla_is_deterministic": (),
    "runtime/test_topk.py::test_topk_matches_xla": (),
    "test_no_crash.py::test_every_elementwise_op_on_every_type_runs_without_crashing": (),
}


def _family(item) -> str:
    return f"{item.path.relative_to(_TESTS).as_posix()}::{item.originalname}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks the cases of _MATRICES beyond their representative subset `slow` (before `-m`
    deselects)."""
    families: dict[str, list] = {}
    for item in items:
        if getattr(item, "callspec", None) is not None and _family(item) in _MATRICES:
            families.setdefault(_family(item), []).append(item)
    for family, cases in families.items():
        thinned = _MATRICES[family]
        seen: set = set()
        for n, item in enumerate(cases):
            values = {(k, repr(v)) for k, v in item.callspec.params.items() if k not in thinned}
            if (thinned and n % _STRIDE == 0) or not values <= seen:
                seen |= values
            else:
                item.add_marker(pytest.mark.slow)
