"""A module cache hit reads only what running the program needs (codegen/module_cache.py
`loads`): the fused module's computations other than the entry stay unread shells until
something uses one (a report, the fused module's text, the step interpreter), and then all of
them are read at once, giving what the original compile had. A later part of an entry that
fails to read raises (never an AttributeError) and removes the entry."""
from __future__ import annotations

import copy
import io
import pickle
import threading

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import cache, module_cache
from hlofuse.runtime.io import random_inputs

# Constants in the entry and in a while body (the driver's table), fusions, a reduction and a
# while loop: kernels whose fused computations a hit must not read.
TEXT = """HloModule lazy

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  st = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  st = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  x = f32[8,16] get-tuple-element(st), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f32[8,16] constant({...})
  t = f32[8,16] tanh(x)
  y = f32[8,16] multiply(t, w)
  ROOT out = (s32[], f32[8,16]) tuple(j, y)
}

ENTRY main {
  p = f32[8,16] parameter(0)
  q = f32[8,16] parameter(1)
  c = f32[8,16] constant({...})
  zero = s32[] constant(0)
  e = f32[8,16] exponential(q)
  x = f32[8,16] add(p, e)
  xc = f32[8,16] multiply(x, c)
  init = (s32[], f32[8,16]) tuple(zero, xc)
  loop = (s32[], f32[8,16]) while(init), condition=cond, body=body
  r = f32[8,16] get-tuple-element(loop), index=1
  z = f32[] constant(0)
  ROOT s = f32[8] reduce(r, z), dimensions={1}, to_apply=add
}
"""


def _text() -> str:
    values = np.linspace(-1.1, 1.9, 128, dtype=np.float32).reshape(8, 16) / np.float32(3)
    rows = ", ".join("{" + ", ".join(repr(float(v)) for v in row) + "}" for row in values)
    return TEXT.replace("{...}", "{" + rows + "}")


def _hit(cache_dir):
    """The first compile of the module and a hit from the disk entry (the memory cache cleared)."""
    first = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert not first.from_cache
    cache.memory_cache.clear()
    exe = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert exe.from_cache
    return first, exe


def _pending_computations(exe) -> list[str]:
    # the fused module and its entry are read (the program runs by them); its computation list
    # is part of the module's state, so asking whether each is pending reads nothing
    return [c for c in exe.fused_module.computations if module_cache.pending(c)]


def test_a_hit_and_its_runs_read_none_of_the_fused_computations(cache_dir):
    first, exe = _hit(cache_dir)
    fused = exe.fused_module
    assert not module_cache.pending(fused) and not module_cache.pending(fused.entry)
    shells = _pending_computations(exe)
    # every computation but the entry: the while loop's, the reduction's and every fusion's
    assert len(shells) == len(fused.computations) - 1 >= 4
    assert all(module_cache.pending(k.comp) for k in exe.program.code.kernels)
    module = hlofuse.parse_hlo(_text())
    for seed in (1, 2):
        args = random_inputs(module, seed=seed)
        assert [x.tobytes() for x in exe(*args)] == [x.tobytes() for x in first(*args)]
    assert _pending_computations(exe) == shells  # running read nothing more


def test_the_first_use_reads_everything_the_compile_had(cache_dir):
    first, exe = _hit(cache_dir)
    assert _pending_computations(exe)
    # any attribute of any pending object reads all of them
    some = _pending_computations(exe)[0]
    assert some.name in [c.name for c in first.fused_module.computations]
    assert _pending_computations(exe) == []
    assert exe.fused_module.to_text() == first.fused_module.to_text()
    assert exe.report() == first.report()
    assert exe.fusion_report().to_text() == first.fusion_report().to_text()


def test_the_step_interpreter_and_a_report_after_a_hit(cache_dir):
    first, exe = _hit(cache_dir)
    module = hlofuse.parse_hlo(_text())
    args = random_inputs(module, seed=3)
    stepped = exe.program.run_interpreted(list(args))  # reads the kernels' computations
    assert [x.tobytes() for x in stepped] == [x.tobytes() for x in first(*args)]
    assert _pending_computations(exe) == []
    assert exe.report() == first.report()


def test_explain_after_a_hit(cache_dir):
    """`explain` fuses the user's module itself; a hit on the same module (whose fused
    instructions point at the user's) leaves its answers as they were."""
    from hlofuse.explain import explain

    module = hlofuse.parse_hlo(_text())
    before = explain(module, ["e", "xc"])
    _hit(cache_dir)
    hit = hlofuse.compile(module, "cpu")
    assert hit.from_cache and _pending_computations(hit)
    assert explain(module, ["e", "xc"]) == before
    assert hit.fusion_report().to_text() and not _pending_computations(hit)


def test_a_missing_attribute_is_an_attribute_error_pending_or_not(cache_dir):
    _, exe = _hit(cache_dir)
    shell = _pending_computations(exe)[0]
    assert not hasattr(shell, "no_such_attribute")  # read the states, then found nothing
    assert not module_cache.pending(shell)
    assert getattr(exe.fused_module.entry.root, "no_such_attribute", None) is None


def test_a_copy_of_a_pending_object_is_read_first(cache_dir):
    first, exe = _hit(cache_dir)
    shell = _pending_computations(exe)[0]
    copied = copy.copy(shell)  # through __getstate__, which reads the entry's states first
    assert not module_cache.pending(shell) and not module_cache.pending(copied)
    assert copied.instructions is shell.instructions  # a shallow copy of the state read


def test_concurrent_first_uses_read_the_states_once(cache_dir):
    first, exe = _hit(cache_dir)
    shells = _pending_computations(exe)
    texts: list[str] = []
    barrier = threading.Barrier(4)

    def use(comp):
        barrier.wait()
        texts.append(f"{comp.name} {len(comp.instructions)}")

    threads = [threading.Thread(target=use, args=(shells[k % len(shells)],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(texts) == 4
    assert exe.fused_module.to_text() == first.fused_module.to_text()


def test_a_loaded_payload_written_again_reads_its_states_first(cache_dir):
    first, exe = _hit(cache_dir)
    module = hlofuse.parse_hlo(_text())
    code = exe.program.code
    payload = {"code": code, "fused": exe.fused_module}
    assert _pending_computations(exe)
    exe.fused_module.entry.root.marker = 1  # set on a read object: kept
    again = module_cache.loads(module_cache.dumps(payload, module, [exe.fused_module]), module)
    assert again["fused"].to_text() == first.fused_module.to_text()
    assert again["fused"].entry.root.marker == 1


def _section_end(data: bytes, module) -> int:
    """Where what a hit with the module at hand reads of an entry ends."""
    f = io.BytesIO(data)
    r = module_cache._Reader(f, module)
    # the payload, the runtime objects' states, the pending shells, the runtime objects whose
    # references to the user's module wait, and those references (read at once with a module)
    for _ in range(5):
        r.load()
    return f.tell()


@pytest.mark.parametrize("where", ["pending states", "fusion logs"])
def test_a_later_section_that_fails_raises_and_removes_the_entry(cache_dir, where):
    module = hlofuse.parse_hlo(_text())
    first = hlofuse.compile(module, "cpu")
    (name,) = [n for n in cache_dir.iterdir() if n.name.endswith(cache.MODULE)]
    key = name.name[:-len(cache.MODULE)]
    disk = cache.CompileCache(str(cache_dir))
    data = disk.load(key, cache.MODULE)
    cut = _section_end(data, module) + 8 if where == "pending states" else len(data) - 8
    disk.store(key, data[:cut], cache.MODULE)  # a well-formed entry file holding a cut pickle
    cache.memory_cache.clear()
    exe = hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu")
    assert exe.from_cache  # what running needs is intact
    args = random_inputs(module, seed=5)
    assert [x.tobytes() for x in exe(*args)] == [x.tobytes() for x in first(*args)]
    with pytest.raises(pickle.UnpicklingError, match="later section could not be read"):
        exe.report()
    with pytest.raises(pickle.UnpicklingError):  # the same error again, not a half-read module
        exe.report()
    assert not disk.has(key, cache.MODULE)
    cache.memory_cache.clear()
    assert not hlofuse.compile(hlofuse.parse_hlo(_text()), "cpu").from_cache


# A dense 3x3 convolution with a relu, which the CPU runs as a oneDNN primitive made at load.
CONV = """HloModule conv
ENTRY e {
  x = f32[4,28,28,32] parameter(0)
  w = f32[3,3,32,64] parameter(1)
  c = f32[4,28,28,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  z = f32[] constant(0)
  zb = f32[4,28,28,64] broadcast(z), dimensions={}
  ROOT r = f32[4,28,28,64] maximum(c, zb)
}
"""


def test_a_hit_makes_onednn_primitives_from_the_entry_not_the_fused_module(cache_dir):
    """The primitives' descriptions come with the entry: derived from the kernels again, they
    would read the fused computations (most of haiku's ResNet-18 hit, 17 ms)."""
    first = hlofuse.compile(hlofuse.parse_hlo(CONV), "cpu")
    if not first.program.primitives:
        pytest.skip("this convolution does not run through oneDNN here (no libdnnl, or HLOFUSE_GEMM=openblas)")
    cache.memory_cache.clear()
    exe = hlofuse.compile(hlofuse.parse_hlo(CONV), "cpu")
    assert exe.from_cache and exe.program.primitives == first.program.primitives
    args = random_inputs(hlofuse.parse_hlo(CONV), seed=6)
    assert [x.tobytes() for x in exe(*args)] == [x.tobytes() for x in first(*args)]
    assert all(module_cache.pending(k.comp) for k in exe.program.code.kernels)
