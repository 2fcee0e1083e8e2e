"""The interpreter's collectives and async ops on one replica and one partition
(hlofuse/runtime/interpreter/single_replica.py): hand-written HLO with values derived by hand
from XLA's single-participant semantics, and JAX programs over a 1-device mesh compiled by XLA
and run by both."""
from __future__ import annotations

import numpy as np
import pytest

from hlofuse import parse_hlo
from hlofuse.hlo.errors import UnsupportedError
from hlofuse.hlo.verifier import verify
from hlofuse.runtime.interpreter import evaluate
from hlofuse.runtime.interpreter.single_replica import read_groups, read_pairs

ADD = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""
ADD_S32 = """
%add_s32 (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] add(%a, %b)
}
"""
X = np.array([[1.5, -2.0, 3.0], [0.25, 7.0, -0.0]], np.float32)


def run(body: str, *args, header: str = "", comps: str = ADD):
    """Evaluate an entry computation `body` (instruction lines) over parameters `args`."""
    params = "\n".join(f"  %p{i} = {_hlo_type(a)} parameter({i})" for i, a in enumerate(args))
    text = f"HloModule m{header}\n{comps}\nENTRY %main {{\n{params}\n{body}\n}}\n"
    module = parse_hlo(text)
    verify(module)  # well-formed for hlofuse's verifier: only the interpreter may refuse it
    return evaluate(module, [np.asarray(a) for a in args])


def _hlo_type(a) -> str:
    a = np.asarray(a)
    name = {"float32": "f32", "int32": "s32", "uint32": "u32", "float64": "f64", "bool": "pred"}[a.dtype.name]
    return f"{name}[{','.join(map(str, a.shape))}]"


def same(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":  # -0.0 stays -0.0: the value is passed through, not recomputed
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


# ---- attribute readers ----------------------------------------------------------------------
@pytest.mark.parametrize("text,groups", [
    ("{}", []), ("{{0}}", [[0]]), ("{{0,1},{2,3}}", [[0, 1], [2, 3]]), ("{{0},{1}}", [[0], [1]]),
    ("[1,1]<=[1]", [[0]]), ("[2,2]<=[4]", [[0, 1], [2, 3]]), ("[2,2]<=[2,2]T(1,0)", [[0, 2], [1, 3]]),
])
def test_read_replica_groups(text, groups):
    assert read_groups(text, "x") == groups


def test_read_source_target_pairs():
    assert read_pairs("{{0,1},{1,0}}", "x") == [(0, 1), (1, 0)]
    assert read_pairs("{}", "x") == []
    with pytest.raises(UnsupportedError, match="pairs"):
        read_pairs("{{0,1,2}}", "x")


# ---- ids --------------------------------------------------------------------------------------
@pytest.mark.parametrize("opcode", ["replica-id", "partition-id"])
def test_ids_are_u32_zero(opcode):
    (out,) = run(f"  ROOT %r = u32[] {opcode}()")
    same(out, np.uint32(0))
    (out,) = run(f"  %r = u32[] {opcode}()\n  %c = f32[] convert(%r)\n"
                 f"  %b = f32[2,3] broadcast(%c), dimensions={{}}\n  ROOT %s = f32[2,3] add(%p0, %b)", X)
    same(out, X + np.float32(0))  # -0.0 + 0 is +0.0


# ---- all-reduce -------------------------------------------------------------------------------
@pytest.mark.parametrize("groups", ["", ", replica_groups={}", ", replica_groups={{0}}",
                                    ", replica_groups=[1,1]<=[1]", ", channel_id=3, replica_groups={{0}}, "
                                    "use_global_device_ids=true"])
def test_all_reduce_of_one_participant_is_its_operand(groups):
    # x, not add(x, x): one participant's value is the reduction.
    (out,) = run(f"  ROOT %r = f32[2,3] all-reduce(%p0){groups}, to_apply=%add", X)
    same(out, X)


def test_all_reduce_never_applies_the_reducer():
    big = np.array([2**31 - 1, -(2**31), 5], np.int32)  # add(x, x) would wrap around
    (out,) = run("  ROOT %r = s32[3] all-reduce(%p0), replica_groups={{0}}, to_apply=%add_s32", big,
                 comps=ADD_S32)
    same(out, big)


def test_variadic_all_reduce_gives_a_tuple_of_its_operands():
    y = np.arange(4, dtype=np.float32)
    outs = run("  ROOT %r = (f32[2,3], f32[4]) all-reduce(%p0, %p1), replica_groups={}, to_apply=%add", X, y)
    same(outs[0], X)
    same(outs[1], y)


def test_all_reduce_start_done():
    (out,) = run("  %s = f32[2,3] all-reduce-start(%p0), replica_groups={{0}}, to_apply=%add\n"
                 "  ROOT %d = f32[2,3] all-reduce-done(%s)", X)
    same(out, X)


@pytest.mark.parametrize("groups", ["{{0,1}}", "{{0},{1}}", "[1,2]<=[2]", "{{1}}"])
def test_groups_naming_other_participants_are_refused(groups):
    with pytest.raises(UnsupportedError, match=r"all-reduce \(instruction r\).*replica_groups.*one replica"):
        run(f"  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups={groups}, to_apply=%add", X)


def test_module_declaring_several_replicas_is_refused_for_all_replica_groups():
    with pytest.raises(UnsupportedError, match=r"instruction r\).*replica_count=2"):
        run("  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups={}, to_apply=%add", X,
            header=", replica_count=2")
    with pytest.raises(UnsupportedError, match=r"instruction r\).*num_partitions=4"):
        run("  ROOT %r = f32[2,3] collective-broadcast(%p0)", X, header=", num_partitions=4")
    # Explicit single-participant groups, or a header of one replica, are fine.
    (out,) = run("  ROOT %r = f32[2,3] all-reduce(%p0), replica_groups={}, to_apply=%add", X,
                 header=", replica_count=1, num_partitions=1")
    same(out, X)


# ---- all-gather, reduce-scatter, all-to-all, collective-broadcast -----------------------------
@pytest.mark.parametrize("line", [
    "f32[2,3] all-gather(%p0), replica_groups={{0}}, dimensions={1}",
    "f32[2,3] all-gather(%p0), channel_id=1, replica_groups=[1,1]<=[1], dimensions={0}, use_global_device_ids=true",
    "f32[2,3] reduce-scatter(%p0), replica_groups={}, dimensions={0}, to_apply=%add",
    "f32[2,3] all-to-all(%p0), replica_groups={{0}}, dimensions={1}",
    "f32[2,3] all-to-all(%p0), replica_groups={{0}}",
    "f32[2,3] collective-broadcast(%p0), replica_groups={{0}}",
])
def test_identity_collectives(line):
    (out,) = run(f"  ROOT %r = {line}", X)
    same(out, X)


def test_tuple_all_to_all_of_one_operand():
    (out,) = run("  ROOT %r = (f32[2,3]) all-to-all(%p0), replica_groups={{0}}", X)
    same(out, X)


def test_variadic_all_gather_and_reduce_scatter():
    y = np.array([4, -5], np.int32)
    outs = run("  %g = (f32[2,3], s32[2]) all-gather(%p0, %p1), replica_groups={}, dimensions={0}\n"
               "  %g0 = f32[2,3] get-tuple-element(%g), index=0\n  %g1 = s32[2] get-tuple-element(%g), index=1\n"
               "  %r = (f32[2,3], s32[2]) reduce-scatter(%g0, %g1), replica_groups={}, dimensions={0}, to_apply=%add\n"
               "  ROOT %t = ((f32[2,3], s32[2]), (f32[2,3], s32[2])) tuple(%g, %r)", X, y)
    for got, want in zip(outs, [X, y, X, y]):
        same(got, want)


@pytest.mark.parametrize("line,why", [
    ("f32[4,3] all-gather(%p0), replica_groups={}, dimensions={0}", "f32\\[4,3\\].*more than one participant"),
    ("f32[1,3] reduce-scatter(%p0), replica_groups={}, dimensions={0}, to_apply=%add", "more than one participant"),
    ("(f32[2,3], f32[2,3]) all-to-all(%p0, %p0), replica_groups={}", "one operand per participant"),
    ("f32[2,3] collective-broadcast(%p0), replica_groups={{0,1}}", "participants \\[0, 1\\]"),
])
def test_results_of_several_participants_are_refused(line, why):
    with pytest.raises(UnsupportedError, match=r"\(instruction r\).*" + why):
        run(f"  ROOT %r = {line}", X)


def test_all_gather_start_done():
    outs = run("  %s = (f32[2,3], f32[2,3]) all-gather-start(%p0), replica_groups={{0}}, dimensions={0}\n"
               "  %in = f32[2,3] get-tuple-element(%s), index=0\n"
               "  %d = f32[2,3] all-gather-done(%s)\n  ROOT %t = (f32[2,3], f32[2,3]) tuple(%in, %d)", X)
    same(outs[0], X)
    same(outs[1], X)


def test_variadic_all_gather_start_nests_operands_and_results():
    y = np.array([1, 2, 3], np.int32)
    outs = run("  %s = ((f32[2,3], s32[3]), (f32[2,3], s32[3])) all-gather-start(%p0, %p1), replica_groups={}, "
               "dimensions={0}\n  ROOT %d = (f32[2,3], s32[3]) all-gather-done(%s)", X, y)
    same(outs[0], X)
    same(outs[1], y)
    with pytest.raises(UnsupportedError, match="more than one participant"):
        run("  %s = (f32[2,3], f32[4,3]) all-gather-start(%p0), replica_groups={}, dimensions={0}\n"
            "  ROOT %d = f32[4,3] all-gather-done(%s)", X)


# ---- collective-permute -----------------------------------------------------------------------
def test_collective_permute_to_self_is_the_operand():
    (out,) = run("  ROOT %r = f32[2,3] collective-permute(%p0), channel_id=1, source_target_pairs={{0,0}}", X)
    same(out, X)


def test_collective_permute_receiving_nothing_gives_zeros():
    (out,) = run("  ROOT %r = f32[2,3] collective-permute(%p0), source_target_pairs={}", X)
    same(out, np.zeros((2, 3), np.float32))
    y = np.array([True, False])
    outs = run("  ROOT %r = (f32[2,3], pred[2]) collective-permute(%p0, %p1), source_target_pairs={}", X, y)
    same(outs[0], np.zeros((2, 3), np.float32))
    same(outs[1], np.zeros(2, bool))


def test_combined_collective_permute():
    y = np.array([7, 8], np.int32)
    outs = run("  ROOT %r = (f32[2,3], s32[2]) collective-permute(%p0, %p1), source_target_pairs={{0,0}}", X, y)
    same(outs[0], X)
    same(outs[1], y)


@pytest.mark.parametrize("pairs", ["{{0,1},{1,0}}", "{{1,0}}", "{{0,1}}"])
def test_collective_permute_naming_other_participants_is_refused(pairs):
    with pytest.raises(UnsupportedError, match=r"collective-permute \(instruction r\).*source_target_pairs"):
        run(f"  ROOT %r = f32[2,3] collective-permute(%p0), source_target_pairs={pairs}", X)


@pytest.mark.parametrize("pairs,want", [("{{0,0}}", X), ("{}", np.zeros((2, 3), np.float32))])
def test_collective_permute_start_done(pairs, want):
    outs = run(f"  %s = (f32[2,3], f32[2,3], u32[], u32[]) collective-permute-start(%p0), channel_id=2, "
               f"source_target_pairs={pairs}\n  %in = f32[2,3] get-tuple-element(%s), index=0\n"
               f"  %c = u32[] get-tuple-element(%s), index=2\n"
               f"  %d = f32[2,3] collective-permute-done(%s)\n"
               f"  ROOT %t = (f32[2,3], f32[2,3], u32[]) tuple(%in, %d, %c)", X)
    same(outs[0], X)
    same(outs[1], want)
    same(outs[2], np.uint32(0))


def test_combined_collective_permute_start():
    y = np.array([7, 8], np.int32)
    outs = run("  %s = ((f32[2,3], s32[2]), (f32[2,3], s32[2]), u32[], u32[]) collective-permute-start(%p0, %p1), "
               "source_target_pairs={}\n  ROOT %d = (f32[2,3], s32[2]) collective-permute-done(%s)", X, y)
    same(outs[0], np.zeros((2, 3), np.float32))
    same(outs[1], np.zeros(2, np.int32))


def test_in_place_collective_permute_is_refused():
    z = np.zeros((), np.int32)
    with pytest.raises(UnsupportedError, match=r"instruction r\).*in-place"):
        run("  %o = (s32[], s32[]) tuple(%p1, %p1)\n"
            "  ROOT %r = f32[2,3] collective-permute(%p0, %p0, %o, %o), source_target_pairs={{0,0}}", X, z)


def test_collective_permute_start_without_context():
    (out,) = run("  %s = (f32[2,3], f32[2,3]) collective-permute-start(%p0), source_target_pairs={{0,0}}\n"
                 "  ROOT %d = f32[2,3] collective-permute-done(%s)", X)
    same(out, X)


# ---- copy-start / copy-done -------------------------------------------------------------------
def test_copy_start_done():
    outs = run("  %s = (f32[2,3], f32[2,3], u32[]) copy-start(%p0)\n"
               "  %src = f32[2,3] get-tuple-element(%s), index=1\n  %d = f32[2,3] copy-done(%s)\n"
               "  ROOT %t = (f32[2,3], f32[2,3]) tuple(%d, %src)", X)
    same(outs[0], X)
    same(outs[1], X)


# ---- async-start / async-update / async-done --------------------------------------------------
ASYNC_COMP = """
%wrapped (a: f32[2,3], b: f32[2,3]) -> f32[2,3] {
  %a = f32[2,3] parameter(0)
  %b = f32[2,3] parameter(1)
  ROOT %m = f32[2,3] multiply(%a, %b)
}
"""


def test_async_start_update_done_evaluate_the_wrapped_computation():
    y = np.full((2, 3), -2.0, np.float32)
    outs = run("  %s = ((f32[2,3], f32[2,3]), f32[2,3], s32[]) async-start(%p0, %p1), calls=%wrapped\n"
               "  %u = ((f32[2,3], f32[2,3]), f32[2,3], s32[]) async-update(%s), calls=%wrapped\n"
               "  %ops = (f32[2,3], f32[2,3]) get-tuple-element(%u), index=0\n"
               "  %ctx = s32[] get-tuple-element(%u), index=2\n"
               "  %d = f32[2,3] async-done(%u), calls=%wrapped\n"
               "  ROOT %t = ((f32[2,3], f32[2,3]), f32[2,3], s32[]) tuple(%ops, %d, %ctx)", X, y,
               comps=ASYNC_COMP)
    same(outs[0], X)
    same(outs[1], y)
    same(outs[2], X * y)
    same(outs[3], np.int32(0))


def test_async_shorthand_around_a_collective():
    # `reduce-scatter-start` is XLA's shorthand for async-start wrapping a reduce-scatter.
    (out,) = run("  %s = ((f32[2,3]), f32[2,3]) reduce-scatter-start(%p0), replica_groups={{0}}, dimensions={0}, "
                 "to_apply=%add\n  ROOT %d = f32[2,3] reduce-scatter-done(%s)", X)
    same(out, X)
    with pytest.raises(UnsupportedError, match="more than one participant"):
        run("  %s = ((f32[2,3]), f32[1,3]) reduce-scatter-start(%p0), replica_groups={}, dimensions={0}, "
            "to_apply=%add\n  ROOT %d = f32[1,3] reduce-scatter-done(%s)", X)


def test_collective_inside_a_loop_body():
    comps = ADD + """
%cond (s: (s32[], f32[2,3])) -> pred[] {
  %s = (s32[], f32[2,3]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (s: (s32[], f32[2,3])) -> (s32[], f32[2,3]) {
  %s = (s32[], f32[2,3]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %v = f32[2,3] get-tuple-element(%s), index=1
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  %ar = f32[2,3] all-reduce(%v), replica_groups={{0}}, to_apply=%add
  %w = f32[2,3] add(%ar, %v)
  ROOT %t = (s32[], f32[2,3]) tuple(%j, %w)
}
"""
    outs = run("  %z = s32[] constant(0)\n  %t = (s32[], f32[2,3]) tuple(%z, %p0)\n"
               "  %w = (s32[], f32[2,3]) while(%t), condition=%cond, body=%body\n"
               "  ROOT %r = f32[2,3] get-tuple-element(%w), index=1", X, comps=comps)
    same(outs[0], X * 8)  # doubled three times


def test_ragged_all_to_all_stays_unsupported_with_a_reason():
    with pytest.raises(UnsupportedError, match="ragged-all-to-all.*not modelled"):
        run("  ROOT %r = f32[2,3] ragged-all-to-all(%p0, %p0, %p1, %p1, %p1, %p1), replica_groups={{0}}",
            X, np.zeros(1, np.int32))


# ---- JAX programs over a 1-device mesh, compiled by XLA ---------------------------------------
jax = pytest.importorskip("jax")
jnp = jax.numpy
P = jax.sharding.PartitionSpec

JAX_PROGRAMS = {
    "psum": lambda a: jax.lax.psum(a, "x"),
    "pmax_pmin": lambda a: jax.lax.pmax(a, "x") * 2 + jax.lax.pmin(a, "x"),
    "psum_tuple": lambda a: sum(jax.lax.psum((a, (a * 3).astype(jnp.int32)), "x")),
    "all_gather_tiled": lambda a: jax.lax.all_gather(a, "x", axis=0, tiled=True) - a,
    "all_gather_untiled": lambda a: jax.lax.all_gather(a, "x", axis=1, tiled=False)[:, 0] + 1,
    "ppermute_self": lambda a: jax.lax.ppermute(a, "x", perm=[(0, 0)]) * 5,
    "ppermute_empty": lambda a: jax.lax.ppermute(a, "x", perm=[]) + a,
    "psum_scatter": lambda a: jax.lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True),
    "axis_index": lambda a: a + jax.lax.axis_index("x").astype(a.dtype) + 1,
    "mixed": lambda a: jax.lax.psum(a, "x") + 2 * jax.lax.all_gather(a, "x", tiled=True)
    + 3 * jax.lax.ppermute(a, "x", perm=[(0, 0)]) + 4 * jax.lax.psum_scatter(a, "x", tiled=True),
}


@pytest.mark.parametrize("name", sorted(JAX_PROGRAMS))
def test_matches_xla_on_a_one_device_mesh(name):
    mesh = jax.make_mesh((1,), ("x",))
    x = np.arange(-4.0, 4.0, dtype=np.float32).reshape(4, 2) * 1.25
    xs = jax.device_put(x, jax.NamedSharding(mesh, P("x")))
    f = jax.jit(jax.shard_map(JAX_PROGRAMS[name], mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    # The algebraic simplifier would fold partition-id to 0 on one partition; keep it for the interpreter.
    text = f.lower(xs).compile(compiler_options={"xla_disable_hlo_passes": "algsimp"}).as_text()
    module = parse_hlo(text)
    verify(module)
    opcodes = {i.opcode for c in module.computations for i in c.instructions}
    # XLA kept the collective: the interpreter, not a simplification, gives the single-participant value.
    assert opcodes & {"all-reduce", "all-gather", "collective-permute", "reduce-scatter", "partition-id"}, opcodes
    (got,) = evaluate(module, [x])
    want = np.asarray(f(xs))
    same(got, want)
