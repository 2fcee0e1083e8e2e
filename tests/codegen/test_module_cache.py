"""Whole-module compile cache entries (codegen/module_cache.py, compiler.compile): a second
compile of a module, in this process or a fresh one, loads the first compile's result (no pass,
no LLVM) and computes bit for bit what it computed; any change of the module or of an option is
a miss; an entry that is damaged, for another key, or names anything but hlofuse's and numpy's
classes is rejected and the module compiled afresh."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import hlofuse
from hlofuse import compiler
from hlofuse.codegen import cache, module_cache
from hlofuse.runtime.io import random_inputs

# A module with a little of everything an entry must carry: constants (literals the driver
# copies into its table), a while loop (a second driver function), a reduction, a fusion.
TEXT = """HloModule cached

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  st = (s32[], f32[16,8]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  st = (s32[], f32[16,8]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  x = f32[16,8] get-tuple-element(st), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f32[16,8] constant({...})
  t = f32[16,8] tanh(x)
  y = f32[16,8] multiply(t, w)
  ROOT out = (s32[], f32[16,8]) tuple(j, y)
}

ENTRY main {
  p = f32[16,8] parameter(0)
  q = f32[16,8] parameter(1)
  zero = s32[] constant(0)
  e = f32[16,8] exponential(q)
  x = f32[16,8] add(p, e)
  init = (s32[], f32[16,8]) tuple(zero, x)
  loop = (s32[], f32[16,8]) while(init), condition=cond, body=body
  r = f32[16,8] get-tuple-element(loop), index=1
  z = f32[] constant(0)
  ROOT s = f32[16] reduce(r, z), dimensions={1}, to_apply=add
}
"""


def _text() -> str:
    """TEXT with its weight literal spelled out (values that are not short decimals, so a
    literal that lost bits on the way through an entry would show in the results)."""
    values = np.linspace(-1.3, 1.7, 128, dtype=np.float32).reshape(16, 8) / np.float32(3)
    rows = ", ".join("{" + ", ".join(repr(float(v)) for v in row) + "}" for row in values)
    return TEXT.replace("{...}", "{" + rows + "}")


def _entries(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith(cache.MODULE))


_SCRIPT = """
import sys, numpy as np, hlofuse
from hlofuse.runtime.io import random_inputs
module = hlofuse.parse_hlo(open(sys.argv[1]).read())
exe = hlofuse.compile(module, "cpu")
out = exe(*random_inputs(module, seed=3))
np.savez(sys.argv[2], *out)
print(exe.from_cache, exe.program.code.compiled_count, exe.fused_module.to_text() == exe.program.code.module.to_text())
"""


def test_a_fresh_process_loads_the_module_entry_and_computes_the_same_bits(cache_dir, tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(_text())
    results = []
    for n in range(2):
        out = subprocess.run([sys.executable, "-c", _SCRIPT, str(path), str(tmp_path / f"out{n}.npz")],
                             capture_output=True, text=True, env={**os.environ, "HLOFUSE_CACHE_DIR": str(cache_dir)},
                             check=True).stdout.split()
        results.append(out)
    assert results[0][0] == "False" and int(results[0][1]) > 0  # compiled
    assert results[1] == ["True", "0", "True"]  # loaded whole: nothing compiled
    assert len(_entries(cache_dir)) == 1
    a, b = np.load(tmp_path / "out0.npz"), np.load(tmp_path / "out1.npz")
    assert a.files == b.files == ["arr_0"]
    assert a["arr_0"].dtype == b["arr_0"].dtype and a["arr_0"].tobytes() == b["arr_0"].tobytes()
    # and what both computed is the interpreter's result
    module = hlofuse.parse_hlo(_text())
    ref = hlofuse.compile(module, "interpreter")(*random_inputs(module, seed=3))[0]
    np.testing.assert_allclose(b["arr_0"], ref, rtol=2e-5, atol=1e-6)


def test_module_entries_off_by_environment(cache_dir, monkeypatch):
    """HLOFUSE_MODULE_CACHE=0: the passes run again and no module entry is read or written
    (what conftest sets for tests that monkeypatch hlofuse)."""
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "0")
    first = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    again = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert not first.from_cache and not again.from_cache and again.timings()
    assert _entries(cache_dir) == []
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "1")
    hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu").from_cache

def test_a_hit_runs_no_pass_and_keeps_the_report(cache_dir, monkeypatch):
    module = hlofuse.parse_hlo(_text())
    first = hlofuse.compile(module, "cpu")
    assert not first.from_cache and first.timings()
    cache.memory_cache.clear()  # from disk

    def no_passes(*args, **kwargs):
        raise AssertionError("a module entry hit ran the passes")

    monkeypatch.setattr(compiler, "optimize", no_passes)
    again = hlofuse.parse_hlo(_text())  # another object with the same text
    exe = hlofuse.compile(again, "cpu")
    assert exe.from_cache and exe.timings() == [] and exe.module is again
    assert exe.fused_module.to_text() == first.fused_module.to_text()
    assert exe.report() == first.report()
    # the fused instructions trace back to the module compiled now, not the first one
    origins = {i.origin for c in exe.fused_module.computations for i in c.instructions if i.origin is not None}
    assert origins and all(o.parent.parent is again for o in origins)
    args = random_inputs(module, seed=5)
    assert [x.tobytes() for x in exe(*args)] == [x.tobytes() for x in first(*args)]


@pytest.mark.parametrize("change", ["module", "fusion", "algorithm", "no cache"])
def test_a_changed_module_or_option_misses(cache_dir, change):
    hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert len(_entries(cache_dir)) == 1
    text, kwargs = _text(), {}
    if change == "module":
        text = text.replace("n = s32[] constant(3)", "n = s32[] constant(4)")
    elif change == "fusion":
        kwargs = {"fusion": False}
    elif change == "algorithm":
        kwargs = {"algorithm": "priority"}
    else:
        kwargs = {"cache": False}
    exe = hlofuse.compile(hlofuse.parse_hlo(text), "cpu", **kwargs)
    assert not exe.from_cache
    assert len(_entries(cache_dir)) == (1 if change == "no cache" else 2)


def _the_entry(cache_dir) -> tuple[str, bytes]:
    """(key, payload) of the one module entry in `cache_dir`."""
    (name,) = _entries(cache_dir)
    key = name[:-len(cache.MODULE)]
    payload = cache.CompileCache(cache_dir).load(key, cache.MODULE)
    assert payload is not None
    return key, payload


class _Foreign:
    """Unpickles as a call of os.system (what a planted entry could hold)."""

    def __reduce__(self):
        return (os.system, ("echo planted > /dev/null",))


@pytest.mark.parametrize("damage", ["flipped byte", "other key", "foreign class", "truncated pickle", "bad reference"])
def test_a_damaged_or_foreign_entry_is_rejected_and_recompiled(cache_dir, damage, capsys):
    module = hlofuse.parse_hlo(_text())
    first = hlofuse.compile(module, "cpu")
    key, payload = _the_entry(cache_dir)
    disk = cache.CompileCache(cache_dir)
    path = disk.path(key, cache.MODULE)
    if damage == "flipped byte":  # the checksum no longer matches
        data = bytearray(open(path, "rb").read())
        data[-100] ^= 0xFF
        open(path, "wb").write(bytes(data))
    elif damage == "other key":  # an intact entry stored under another key, renamed to this one
        disk.store("0" * 64, payload, cache.MODULE)
        os.replace(disk.path("0" * 64, cache.MODULE), path)
    elif damage == "foreign class":  # intact header and checksum, a pickle naming os.system
        disk.store(key, pickle.dumps({"code": _Foreign()}), cache.MODULE)
    elif damage == "truncated pickle":
        disk.store(key, payload[: len(payload) // 2], cache.MODULE)
    else:  # written for another module: refers to an entry parameter this one does not have
        other = hlofuse.parse_hlo(_text().replace("q = f32", "q2 = f32").replace("exponential(q)", "exponential(q2)"))
        hlofuse.compile(other, "cpu")
        (other_name,) = [n for n in _entries(cache_dir) if not n.startswith(key)]
        disk.store(key, disk.load(other_name[:-len(cache.MODULE)], cache.MODULE), cache.MODULE)
    cache.memory_cache.clear()
    exe = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert not exe.from_cache  # compiled afresh
    args = random_inputs(module, seed=2)
    assert [x.tobytes() for x in exe(*args)] == [x.tobytes() for x in first(*args)]
    if damage in ("flipped byte", "other key"):
        assert "damaged or not for its key" in capsys.readouterr().err
    else:
        assert "could not be read" in capsys.readouterr().err
    # the bad entry was replaced by a good one
    cache.memory_cache.clear()
    assert hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu").from_cache


def test_only_hlofuse_numpy_and_plain_builtins_are_read():
    module = hlofuse.parse_hlo(_text())
    for bad in (_Foreign(), pickle.loads, subprocess.run):
        with pytest.raises(pickle.UnpicklingError, match="may not name"):
            module_cache.loads(pickle.dumps(bad), module)
    back = module_cache.loads(module_cache.dumps({1: np.arange(3), 2: {3.5}, 3: 1j}, module), module)
    assert back[2] == {3.5} and back[3] == 1j and back[1].tolist() == [0, 1, 2]


def test_an_entry_does_not_recurse_on_the_modules_depth():
    """A chain far deeper than Python's recursion limit round-trips (pickle recurses on
    nesting; an entry never nests one instruction in another)."""
    depth = 3 * sys.getrecursionlimit()
    lines = ["HloModule deep", "ENTRY main {", "  v0 = f32[4] parameter(0)"]
    lines += [f"  v{i} = f32[4] negate(v{i - 1})" for i in range(1, depth)]
    lines += [f"  ROOT r = f32[4] add(v{depth - 1}, v0)", "}"]
    user = hlofuse.parse_hlo("\n".join(lines) + "\n")
    work = user.clone()  # its instructions' origins are the user's
    data = module_cache.dumps({"fused": work}, user)
    back = module_cache.loads(data, user)["fused"]
    assert back is not work and back.to_text() == work.to_text()
    assert [i.origin for i in back.entry.instructions] == user.entry.instructions


def test_the_key_holds_text_target_options_machine_and_source():
    base = dict(text="HloModule m", target="cpu", options={"fusion": True}, target_fingerprint="x86|znver5|+avx")
    key = module_cache.module_key(**base)
    assert key == module_cache.module_key(**base)
    for field, other in (("text", "HloModule n"), ("target", "gpu"), ("options", {"fusion": False}),
                         ("target_fingerprint", "x86|znver4|+avx")):
        assert module_cache.module_key(**{**base, field: other}) != key, field


def test_a_dump_dir_compile_writes_no_module_entry(cache_dir, tmp_path):
    hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu", dump_dir=str(tmp_path / "dump"))
    assert not os.path.exists(cache_dir) or _entries(cache_dir) == []


def _chain(depth: int) -> hlofuse.HloModule:
    lines = ["HloModule chain", "ENTRY main {", "  v0 = f32[4] parameter(0)"]
    lines += [f"  v{i} = f32[4] negate(v{i - 1})" for i in range(1, depth)]
    lines += [f"  ROOT r = f32[4] add(v{depth - 1}, v0)", "}"]
    return hlofuse.parse_hlo("\n".join(lines) + "\n")


def test_a_loaded_entry_goes_to_the_oldest_generation_uncollected():
    """The objects an entry is read into are long-lived: loading leaves them in the collector's
    oldest generation and its youngest generation's count near zero, so no young collection
    walks them after the load (one walked ~93,000 objects for haiku's ResNet-18 step)."""
    import gc

    user = _chain(2000)
    data = module_cache.dumps({"fused": user.clone()}, user)
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        back = module_cache.loads(data, user)["fused"]
        insts = back.entry.instructions  # the first use reads the pending states (loads)
        young = gc.get_count()[0]
        junk = [[i] for i in range(200)]  # allocations after the load: no collection is due
    finally:
        gc.callbacks.remove(count)
    assert young < 50 and collections == [], (young, collections)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert len(insts) == 2001 and all(id(i) in oldest for i in insts)
    assert all(id(i.operands) in oldest for i in insts[1:])
    del junk


def test_a_process_that_froze_objects_keeps_them_frozen():
    """Promotion unfreezes everything gc.freeze() froze: a process that froze objects itself
    (a pre-fork server) keeps them frozen, and the entry loads all the same."""
    import gc

    user = _chain(50)
    data = module_cache.dumps({"fused": user.clone()}, user)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        back = module_cache.loads(data, user)["fused"]
        assert gc.get_freeze_count() == frozen > 0
        assert back.to_text() == user.to_text()
    finally:
        gc.unfreeze()


def test_each_object_of_the_users_module_is_written_and_resolved_once(monkeypatch):
    """An object of the compiled module referred to many times (every fused instruction's
    origin, a computation's instructions' parent) is one reference in the entry, resolved once
    when read (pickle memoizes it), and resolves to that very object."""
    user = _chain(300)
    work = user.clone()
    refs = [i.origin for i in work.entry.instructions] * 3 + [user, user.entry]
    calls: list[tuple] = []
    resolve = module_cache._Reader._resolve

    def counted(self, *ref):
        calls.append(ref)
        return resolve(self, *ref)

    monkeypatch.setattr(module_cache._Reader, "_resolve", counted)
    back = module_cache.loads(module_cache.dumps({"fused": work, "refs": refs}, user), user)
    assert back["refs"] == refs and all(a is b for a, b in zip(back["refs"], refs))
    assert [i.origin for i in back["fused"].entry.instructions] == user.entry.instructions
    assert len(calls) == len(set(calls)) == len(user.entry.instructions) + 2


@pytest.mark.parametrize("dtype", ["bf16", "f8e4m3fn", "f8e5m2", "s4", "u4"])
def test_an_entry_with_narrow_type_constants_is_read_back(cache_dir, dtype, capsys):
    """Constants of ml_dtypes' types (bf16, f8, s4/u4) pickle as arrays naming those types:
    their entries are read (XLA's parser tests' bf16 constant module was written, then refused
    as naming ml_dtypes.bfloat16, warned about and recompiled on every run)."""
    text = (f"HloModule narrow\nENTRY e {{\n  p = {dtype}[4] parameter(0)\n"
            f"  c = {dtype}[4] constant({{1, 2, 3, 4}})\n  ROOT a = {dtype}[4] add(p, c)\n}}\n")
    module = hlofuse.parse_hlo(text)
    args = random_inputs(module, seed=1)
    first = hlofuse.compile(module, "cpu")
    cache.memory_cache.clear()  # from disk
    again = hlofuse.compile(hlofuse.parse_hlo(text), "cpu")
    assert again.from_cache
    assert "could not be read" not in capsys.readouterr().err
    assert [x.tobytes() for x in again(*args)] == [x.tobytes() for x in first(*args)]


def test_only_the_scalar_types_of_ml_dtypes_are_read():
    import ml_dtypes

    module = hlofuse.parse_hlo(_text())
    with pytest.raises(pickle.UnpicklingError, match="may not name"):
        module_cache.loads(pickle.dumps(ml_dtypes.finfo), module)
    back = module_cache.loads(module_cache.dumps(np.arange(3).astype(ml_dtypes.bfloat16), module), module)
    assert back.dtype == ml_dtypes.bfloat16 and back.tolist() == [0, 1, 2]


_LIBRARY_STEP = """HloModule library_step
ENTRY e {
  a = f32[4,4] parameter(0)
  b = f32[3,4] parameter(1)
  s = f32[3,4] triangular-solve(a, b), lower=true, transpose_a=NO_TRANSPOSE
  ROOT r = f32[3,4] add(s, b)
}
"""


def test_a_fresh_process_hit_runs_a_library_step(cache_dir, tmp_path):
    """A program read whole from a module entry makes no Planner, which is what loads the
    library rules: a fresh process's first run of a library step (triangular-solve here; any
    custom-call, copy-start, ...) called a None rule (TypeError) until the step loaded them."""
    path = tmp_path / "m.hlo"
    path.write_text(_LIBRARY_STEP)
    results = []
    for n in range(2):
        proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(path), str(tmp_path / f"out{n}.npz")],
                              capture_output=True, text=True,
                              env={**os.environ, "HLOFUSE_CACHE_DIR": str(cache_dir)})
        assert proc.returncode == 0, proc.stderr[-2000:]
        results.append(proc.stdout.split())
    assert results[0][0] == "False" and results[1][0] == "True"
    a, b = np.load(tmp_path / "out0.npz"), np.load(tmp_path / "out1.npz")
    assert a["arr_0"].tobytes() == b["arr_0"].tobytes()
