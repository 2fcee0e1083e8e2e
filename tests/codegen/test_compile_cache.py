"""Per-kernel compilation and the compile cache (codegen/cpu.py, codegen/kernel_key.py,
codegen/cache.py): structurally identical kernels compile once, a module changed in one place
recompiles one kernel, every kernel still computes what the interpreter computes, and the disk
cache loads only entries it wrote itself (owner, key, checksum), in a directory only its user
can write, bounded by LRU eviction."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys

import numpy as np
import pytest

import hlofuse
from hlofuse.codegen import cache
from hlofuse.codegen.cpu import CpuCode, CpuPlanner, emit_kernel_module
from hlofuse.codegen.kernel_key import kernel_text
from hlofuse.emitters.cpu.target import CpuTarget
from hlofuse.runtime.cpu_executor import CpuProgram
from hlofuse.runtime.io import random_inputs
from repo_paths import EXAMPLES

SHAPES = ["f32[64,32]", "f32[32]", "f32[16,8]"]


def adam_text(n: int, shapes: list[str] = SHAPES, metadata: bool = True) -> str:
    """An optimizer step: `n` Adam-like updates of parameters of a few shapes (same-shaped
    updates are structurally identical; metadata differs per update, as JAX writes it)."""
    lines = ["HloModule step", "", "ENTRY main {", "  lr = f32[] parameter(0)"]
    outs = []
    for i in range(n):
        s = shapes[i % len(shapes)]
        md = f', metadata={{op_name="update{i}" source_line={i}}}' if metadata else ""
        lines += [f"  p{i} = {s} parameter({3 * i + 1})",
                  f"  g{i} = {s} parameter({3 * i + 2})",
                  f"  m{i} = {s} parameter({3 * i + 3})",
                  f"  b{i} = {s} broadcast(lr), dimensions={{}}",
                  f"  c{i} = f32[] constant(0.9)",
                  f"  cb{i} = {s} broadcast(c{i}), dimensions={{}}",
                  f"  mm{i} = {s} multiply(m{i}, cb{i}){md}",
                  f"  mn{i} = {s} add(mm{i}, g{i}){md}",
                  f"  r{i} = {s} rsqrt(mn{i}){md}",
                  f"  st{i} = {s} multiply(b{i}, r{i}){md}",
                  f"  u{i} = {s} subtract(p{i}, st{i}){md}"]
        outs += [f"u{i}", f"mn{i}"]
    tuple_shape = ", ".join(shapes[i % len(shapes)] for i in range(n) for _ in range(2))
    lines += [f"  ROOT out = ({tuple_shape}) tuple({', '.join(outs)})", "}"]
    return "\n".join(lines) + "\n"


def _inputs(module) -> list[np.ndarray]:
    args = random_inputs(module, seed=1)
    return [(np.abs(a) + 0.5).astype(a.dtype) if a.ndim else np.full((), 0.01, a.dtype) for a in args]


def _fused(text: str):
    return hlofuse.compiler.optimize(hlofuse.parse_hlo(text), "cpu")[0]


# ---- kernels compiled once per structure ------------------------------------------------------
def test_same_shaped_optimizer_updates_share_one_kernel_and_match_the_interpreter():
    module = hlofuse.parse_hlo(adam_text(12))
    exe = hlofuse.compile(module, "cpu", cache=False)
    code = exe.program.code
    assert len(code.kernels) >= 12
    # Each update fuses into one kernel (the parameter's, which also writes the moment: CPU
    # multi-output fusion): one per distinct shape, whatever the names and metadata.
    assert len(code.objects) == code.compiled_count == len(SHAPES)
    args = _inputs(module)
    want = hlofuse.compile(module, "interpreter")(*args)
    for g, w in zip(exe(*args), want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("change", [
    ("rsqrt(mn0)", "sqrt(mn0)", 1),  # opcode
    ("constant(0.9)", "constant(0.8)", 1),  # literal (the first update's only)
    ("subtract(p0, st0)", "subtract(st0, p0)", 1),  # operand order
    ("f32[64,32]", "f32[64,33]", 1),  # shape (every update of that shape: its one kernel)
    # the same element count: the same shape-generic kernel (codegen/generic_kernels.py)
    ("f32[64,32]", "f32[32,64]", 0),
])
def test_a_change_in_one_place_recompiles_only_the_kernels_it_changes(change):
    """Compiled (memory cache) first, then changed: only the changed kernels are compiled."""
    old, new, n_changed = change
    first = CpuProgram.compile(_fused(adam_text(6)))
    assert first.code.objects
    second = CpuProgram.compile(_fused(adam_text(6).replace(old, new, 1 if "(" in old else -1)))
    changed = [o for o in second.code.objects if not o.cached]
    assert len(changed) == n_changed, [kernel_text(o.kernels[0]) for o in changed]
    module = hlofuse.parse_hlo(adam_text(6).replace(old, new, 1 if "(" in old else -1))
    args = _inputs(module)
    want = hlofuse.compile(module, "interpreter")(*args)
    got = second.run(args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_kernel_text_ignores_names_and_metadata_only():
    a = _fused(adam_text(3, metadata=True))
    b = _fused(re.sub(r"\bu(\d)", r"w\1", adam_text(3, metadata=False).replace("mm", "zz")))
    ka = [kernel_text(k) for k in _kernels(a)]
    kb = [kernel_text(k) for k in _kernels(b)]
    assert ka == kb
    assert len(set(ka)) == len(SHAPES)


def _kernels(fused) -> list:
    planner = CpuPlanner()
    code = CpuCode(fused, planner)
    planner.plan(fused.entry)
    return code.kernels


def _corpus_modules() -> list:
    from fusion_cases import load_cases, run_passes

    modules = []
    for case in load_cases():
        if case.target != "cpu":
            continue
        try:
            modules.append(run_passes(case))
        except Exception:  # a case whose passes need something else: not this test's subject
            continue
    for name in ("softmax", "layer_norm", "lstm_cell"):
        modules.append(_fused((EXAMPLES / f"{name}.hlo").read_text()))
    modules.append(_fused(adam_text(6)))
    return modules


def _without_names(ir_text: str) -> str:
    """LLVM IR with internal global names (named after HLO instructions) numbered instead."""
    names: dict[str, str] = {}
    return re.sub(r'@"?const\.[^",\s()]*"?', lambda m: names.setdefault(m.group(0), f"@g{len(names)}"), ir_text)


def test_kernels_with_equal_texts_emit_equal_llvm_ir():
    """The key's soundness: across the fusion goldens and examples, every two kernels with
    the same structural text emit the same LLVM IR under the same name (so sharing one object
    changes nothing)."""
    target = CpuTarget()
    by_text: dict[str, str] = {}
    checked = 0
    for fused in _corpus_modules():
        try:
            kernels = _kernels(fused)
        except Exception:
            continue
        for k in kernels:
            text = kernel_text(k)
            ir_text = _without_names(str(emit_kernel_module(k, target, "f")))
            if text in by_text:
                assert by_text[text] == ir_text, text
                checked += 1
            by_text[text] = ir_text
    assert checked > 0 and len(by_text) > 10


def test_llvm_ir_has_every_kernel_under_its_own_name():
    code = CpuProgram.compile(_fused(adam_text(4))).code
    ir = code.llvm_ir()
    for k in code.kernels:
        assert re.search(rf"define void @{k.name}\(", ir), k.name
    assert len(code.objects) < len(code.kernels)


def _defined_globals(obj: bytes) -> set[str]:
    """Global and weak symbols an ELF64 relocatable object defines."""
    import struct

    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, sh_type, _, _, offset, size, link, _, _, _ in sections:
        if sh_type != 2:
            continue
        strtab = sections[link][4]
        for k in range(size // 24):
            st_name, st_info, _, st_shndx, _, _ = struct.unpack_from("<IBBHQQ", obj, offset + 24 * k)
            if st_shndx != 0 and st_info >> 4 in (1, 2) and st_name:
                end = obj.index(b"\0", strtab + st_name)
                names.add(obj[strtab + st_name:end].decode())
    return names


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
def test_each_kernel_object_defines_only_its_function(dtype):
    """Objects loaded side by side must not define a symbol twice: each object file defines
    the functions of the kernels compiled in it (a group, codegen/cpu.py kernel_groups) and
    nothing else (constants are internal; half conversions come from llvm.add_symbol)."""
    text = f"""HloModule m
add {{
  p = {dtype}[] parameter(0)
  q = {dtype}[] parameter(1)
  ROOT z = {dtype}[] add(p, q)
}}
ENTRY e {{
  x = {dtype}[64] parameter(0)
  y = {dtype}[64] parameter(1)
  a = {dtype}[64] exponential(x)
  c = {dtype}[64] constant({{{", ".join(["1.5"] * 64)}}})
  s = {dtype}[64] add(a, c)
  r = {dtype}[] constant(0)
  t = {dtype}[] reduce(y, r), dimensions={{0}}, to_apply=add
  tb = {dtype}[64] broadcast(t), dimensions={{}}
  ROOT o = ({dtype}[64], {dtype}[64]) tuple(s, tb)
}}
"""
    module = hlofuse.parse_hlo(text)
    prog = CpuProgram.compile(hlofuse.compiler.optimize(module, "cpu")[0], cache=False)
    files: dict[bytes, set[str]] = {}
    for o in prog.code.objects:
        files.setdefault(o.object_code, set()).add(o.symbol)
    for obj, symbols in files.items():
        assert _defined_globals(obj) == symbols
    args = _inputs(module)
    want = hlofuse.compile(module, "interpreter")(*args)
    for g, w in zip(prog.run(args), want):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-2)


# ---- the disk cache ---------------------------------------------------------------------------
KEY = "ab" * 32
OTHER = "cd" * 32


def test_entries_round_trip_and_are_checked(tmp_path):
    c = cache.CompileCache(tmp_path / "c")
    c.store(KEY, b"object code")
    assert c.load(KEY) == b"object code"
    assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o700
    assert not [p for p in os.listdir(tmp_path / "c") if p.endswith(".tmp")]


@pytest.mark.parametrize("damage", ["other key", "payload", "checksum", "magic", "truncated", "raw object"])
def test_a_damaged_or_foreign_entry_is_not_loaded_and_is_removed(tmp_path, damage):
    c = cache.CompileCache(tmp_path)
    c.store(OTHER, b"\x7fELF object of another key")
    entry = open(c.path(OTHER), "rb").read()
    if damage == "other key":
        data = entry
    elif damage == "payload":
        data = entry[:-1] + b"X"
    elif damage == "checksum":
        i = entry.index(b"\n", len(b"HLOFUSE-KERNEL-OBJECT 1\n") + 1) + 1
        data = entry[:i] + (b"0" if entry[i:i + 1] != b"0" else b"1") + entry[i + 1:]
    elif damage == "magic":
        data = b"X" + entry[1:]
    elif damage == "truncated":
        data = entry[:40]
    else:
        data = b"\x7fELF raw object written by someone else"
    key = OTHER if damage != "other key" else KEY
    with open(c.path(key), "wb") as f:
        f.write(data)
    assert c.load(key) is None
    assert not os.path.exists(c.path(key))


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_directory_others_can_write_is_refused(tmp_path, mode, capsys):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, mode)
    c = cache.CompileCache(d)
    assert not c.usable()
    c.store(KEY, b"x")
    assert c.load(KEY) is None and not os.listdir(d)
    assert "compile cache disabled" in capsys.readouterr().err
    # compiling still works, without the cache
    exe = hlofuse.compile(hlofuse.parse_hlo(adam_text(1)), "cpu", cache_dir=str(d))
    assert exe.program.code.objects and not os.listdir(d)


def test_eviction_removes_the_least_recently_used_entries(tmp_path):
    c = cache.CompileCache(tmp_path, max_bytes=3000)
    keys = [f"{i:064x}" for i in range(5)]
    for i, k in enumerate(keys):
        c.store(k, bytes(900))
        os.utime(c.path(k), (1000 + i, 1000 + i))
    c.load(keys[0])  # used: now the most recent
    assert c.evict() == 3
    left = sorted(n for n in os.listdir(tmp_path) if n.endswith(".o"))
    assert left == sorted([keys[0] + ".o", keys[4] + ".o"])


def _entry_bytes(payload: int) -> int:
    return len(cache._MAGIC[cache.OBJECT]) + cache._DIGEST_LINES + payload


def test_eviction_lists_the_directory_only_once_the_bound_may_be_crossed(tmp_path, monkeypatch):
    """A store under the bound costs two small reads, not a listing of every entry (a cache of
    70,000 entries took seconds per compile); the store that may cross the bound scans, and
    the scan removes down to LOW_WATER of it."""
    c = cache.CompileCache(tmp_path, max_bytes=10 * _entry_bytes(1000))
    scans = []
    real_entries = cache.CompileCache.entries
    monkeypatch.setattr(cache.CompileCache, "entries", lambda self: scans.append(1) or real_entries(self))
    assert c.evict() == 0 and len(scans) == 1  # no record of a scan yet: one scan
    for i in range(10):
        c.store(f"{i:064x}", bytes(1000))
        os.utime(c.path(f"{i:064x}"), (1000 + i, 1000 + i))
        assert c.evict() == 0
    assert len(scans) == 1 and c.estimated_bytes() == 10 * _entry_bytes(1000)
    c.store(f"{10:064x}", bytes(1000))  # 11 entries: over the bound
    assert c.evict() == 2 and len(scans) == 2  # down to 9 = LOW_WATER of 10
    left = sorted(n for n in os.listdir(tmp_path) if n.endswith(".o"))
    assert left == [f"{i:064x}.o" for i in range(2, 11)]
    assert c.estimated_bytes() == 9 * _entry_bytes(1000)


def test_every_process_stores_count_toward_the_bound(tmp_path):
    """Two caches on one directory (two processes) append to the same record."""
    a = cache.CompileCache(tmp_path, max_bytes=4 * _entry_bytes(100))
    b = cache.CompileCache(tmp_path, max_bytes=4 * _entry_bytes(100))
    a.evict(force=True)
    for i in range(3):
        a.store(f"a{i:063x}", bytes(100))
        b.store(f"b{i:063x}", bytes(100))
    assert a.estimated_bytes() == b.estimated_bytes() == 6 * _entry_bytes(100)
    assert b.evict() == 3  # 6 entries down to at most 3.6
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".o")]) == 3


def test_damaged_bookkeeping_means_a_full_scan(tmp_path):
    c = cache.CompileCache(tmp_path, max_bytes=2 * _entry_bytes(10))
    for i in range(3):
        c.store(f"{i:064x}", bytes(10))
    (tmp_path / ".usage").write_bytes(b"not a number")
    assert c.estimated_bytes() is None
    assert c.evict() == 2


def test_the_size_bound_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("HLOFUSE_CACHE_MAX_BYTES", "12345")
    assert cache.CompileCache("/nonexistent").max_bytes == 12345
    monkeypatch.delenv("HLOFUSE_CACHE_MAX_BYTES")
    assert cache.max_cache_bytes() == cache.DEFAULT_MAX_BYTES


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache.default_cache_dir() == str(tmp_path / "explicit")
    monkeypatch.delenv("HLOFUSE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == str(tmp_path / "xdg" / "hlofuse")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.default_cache_dir() == str(tmp_path / "home" / ".cache" / "hlofuse")


def test_compile_uses_the_default_cache_and_a_fresh_process_loads_from_it(monkeypatch, tmp_path):
    d = tmp_path / "user-cache"
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(d))
    monkeypatch.setenv("HLOFUSE_MODULE_CACHE", "1")  # conftest turns it off under monkeypatch; d starts empty
    cache.memory_cache.clear()
    text = adam_text(3, shapes=["f32[48]", "f32[6,8]", "f32[3,16]"])
    exe = hlofuse.compile(hlofuse.parse_hlo(text), "cpu")
    objects = [n for n in os.listdir(d) if n.endswith(cache.OBJECT)]
    assert len(objects) == len(exe.program.code.objects) + 1 == 4  # one kernel per update, the driver
    bookkeeping = (cache._USAGE, cache._ADDED)
    assert [n for n in os.listdir(d) if not n.endswith(cache.OBJECT) and n not in bookkeeping] == [exe_key(d)]
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    script = ("import hlofuse, sys; exe = hlofuse.compile(hlofuse.parse_hlo(sys.stdin.read()), 'cpu'); "
              "print(exe.program.code.compiled_count)")
    for module_entry in (True, False):  # from the module's entry, then from the kernels' objects
        if not module_entry:
            os.remove(d / exe_key(d))
        out = subprocess.run([sys.executable, "-c", script], input=text, capture_output=True, text=True,
                             env={**os.environ, "HLOFUSE_CACHE_DIR": str(d)}, check=True).stdout
        assert out.strip() == "0"


def exe_key(d) -> str:
    """The file name of the one module entry in cache directory `d`."""
    (name,) = [n for n in os.listdir(d) if n.endswith(cache.MODULE)]
    return name


def test_compile_without_the_cache_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "c"))
    exe = hlofuse.compile(hlofuse.parse_hlo(adam_text(2, shapes=["f32[40]", "f32[5,8]"])), "cpu", cache=False)
    assert exe.program.code.compiled_count == len(exe.program.code.objects) == 2
    assert not os.path.exists(tmp_path / "c")


def test_cli_no_cache_and_timings(monkeypatch, tmp_path, capsys):
    from hlofuse.cli import main

    d = tmp_path / "c"
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(d))
    path = tmp_path / "m.hlo"
    path.write_text(adam_text(2, shapes=["f32[24]", "f32[3,8]"]))
    assert main(["compile", str(path), "--timings", "--no-cache"]) == 0
    err = capsys.readouterr().err
    for stage in ("parse", "fusion", "planning", "emission", "llvm optimization", "code generation", "driver", "loading"):
        assert re.search(rf"^{stage} +[0-9.]+ ms", err, re.M), (stage, err)
    assert not d.exists()
    assert main(["compile", str(path), "--timings"]) == 0
    assert len([n for n in os.listdir(d) if n.endswith(cache.OBJECT)]) == 3  # two kernels and the driver
    assert main(["run", str(path), "--compare", "--no-cache"]) == 0


def test_the_key_changes_with_the_code_generators_source(monkeypatch):
    """An edited emitter (a checkout between releases) never loads kernels an older one wrote."""
    from hlofuse.codegen import cache

    before = cache.cache_key("kernel text", "target")
    assert cache.cache_key("kernel text", "target") == before  # deterministic
    monkeypatch.setitem(cache._DIGESTS, cache._CODE_FOLDERS, "0" * 64)  # as if the source changed
    assert cache.cache_key("kernel text", "target") != before
    monkeypatch.delitem(cache._DIGESTS, cache._CODE_FOLDERS)  # computed again from the files
    assert cache.code_digest() and cache.cache_key("kernel text", "target") == before


def test_the_source_signature_sees_edits_by_size_and_time(tmp_path):
    """source_digest reads the package's files' stat (path, size, modification time), not
    their bytes: an edit of the same size at another time, a new file and a new size all
    change the signature; bytecode caches and other files do not count."""
    from hlofuse.codegen import cache

    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    a, b = tmp_path / "pkg" / "a.py", tmp_path / "pkg" / "sub" / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    os.utime(a, ns=(10**18, 10**18))
    os.utime(b, ns=(10**18, 10**18))

    def signature() -> str:
        return cache._tree_signature(str(tmp_path / "pkg"), len(str(tmp_path)) + 1)

    first = signature()
    assert first.splitlines() == [f"pkg/a.py 6 {10**18}", f"pkg/sub/b.py 6 {10**18}"]
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0" * 9)
    (tmp_path / "pkg" / "notes.txt").write_text("not source")
    assert signature() == first
    a.write_text("x = 3\n")  # same size, new time
    assert signature() != first
    os.utime(a, ns=(10**18, 10**18))
    assert signature() == first
    a.write_text("x = 10\n")
    os.utime(a, ns=(10**18, 10**18))  # same time, new size
    assert signature() != first
    a.write_text("x = 1\n")
    os.utime(a, ns=(10**18, 10**18))
    (tmp_path / "pkg" / "sub" / "c.py").write_text("")
    assert signature() != first
