"""Compiles found by their source (compiler.compile_source, hlofuse.compile_text/compile_file,
`hlofuse run`): a source compiled before loads its module entry by the source's digest,
without parsing it or printing the module for the key; the module is made only when read
(a report, --compare); any change of the source or of an option is a miss; a source entry
naming a module entry that is gone, or holding anything but a key, is a miss too."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import hlofuse
from hlofuse.codegen import cache, module_cache
from hlofuse.hlo import parser
from hlofuse.hlo.ir import HloModule
from hlofuse.runtime.io import random_inputs

from test_module_cache import _text


def _sources(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith(cache.SOURCE)) if os.path.isdir(d) else []


def _counting_parses(monkeypatch) -> list:
    calls: list = []
    real = parser.parse_hlo

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(parser, "parse_hlo", counted)
    return calls


def test_a_text_compiled_before_is_loaded_without_parsing(cache_dir, monkeypatch):
    text = _text()
    first = hlofuse.compile_text(text, "cpu")
    assert not first.from_cache and first.module_entry_key is not None
    assert len(_sources(cache_dir)) == 1
    cache.memory_cache.clear()  # as a new process: from the disk
    parses = _counting_parses(monkeypatch)
    second = hlofuse.compile_text(text, "cpu")
    assert second.from_cache and second.module_entry_key == first.module_entry_key
    args = random_inputs(second.fused_module, seed=4)  # the entry parameters, from the entry
    got = second(*args)
    assert parses == []  # loaded and ran without the module
    assert not isinstance(second._module, HloModule)
    want = first(*args)
    assert [a.tobytes() for a in got] == [b.tobytes() for b in want]
    # the module is made when read, once; a report reads the rest of the entry against it
    assert isinstance(second.module, HloModule) and parses == [1]
    assert second.module is second.module and parses == [1]
    assert second.fusion_report().to_text() == first.fusion_report().to_text()


def test_any_change_of_the_source_or_an_option_is_a_miss(cache_dir):
    text = _text()
    hlofuse.compile_text(text, "cpu")
    changed = text.replace("exponential(q)", "tanh(q)")
    assert not hlofuse.compile_text(changed, "cpu").from_cache
    assert not hlofuse.compile_text(text, "cpu", fusion=False).from_cache
    assert hlofuse.compile_text(text, "cpu").from_cache
    # a trailing newline is another source, whose module is the same: found by the module's key
    other = hlofuse.compile_text(text + "\n", "cpu")
    assert other.from_cache and len(_sources(cache_dir)) == 4


def test_a_source_entry_whose_module_entry_is_gone_recompiles(cache_dir):
    text = _text()
    first = hlofuse.compile_text(text, "cpu")
    disk = cache.CompileCache(str(cache_dir))
    disk.remove(first.module_entry_key, cache.MODULE)
    cache.memory_cache.clear()
    again = hlofuse.compile_text(text, "cpu")
    assert not again.from_cache and again.module_entry_key == first.module_entry_key
    (name,) = _sources(cache_dir)
    key = name[:-len(cache.SOURCE)]
    disk.store(key, b"not a key", cache.SOURCE)  # intact header, a payload that names nothing
    cache.memory_cache.clear()
    assert module_cache.load_source(key, str(cache_dir)) is None
    assert hlofuse.compile_text(text, "cpu").from_cache  # the module's own key still finds it


def test_other_targets_compile_the_module(cache_dir):
    text = _text()
    exe = hlofuse.compile_text(text, "interpreter")
    assert not exe.from_cache and isinstance(exe._module, HloModule)
    assert _sources(cache_dir) == []


_RUN = """
import sys, hlofuse
from hlofuse.hlo import parser
calls = []
real = parser.parse_hlo
parser.parse_hlo = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
from hlofuse.cli import main
status = main(["run", sys.argv[1], "--inputs", sys.argv[2], "-o", sys.argv[3]])
print(status, len(calls))
"""


def test_the_command_line_runs_a_file_compiled_before_without_parsing_it(cache_dir, tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(_text())
    module = hlofuse.parse_hlo(_text())
    np.savez(tmp_path / "in.npz", **{f"arg{i}": a for i, a in enumerate(random_inputs(module, seed=5))})
    outs = []
    for n in range(2):
        out = tmp_path / f"out{n}.npz"
        res = subprocess.run([sys.executable, "-c", _RUN, str(path), str(tmp_path / "in.npz"), str(out)],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "HLOFUSE_CACHE_DIR": str(cache_dir)})
        outs.append((res.stdout.split(), np.load(out)))
    assert outs[0][0] == ["0", "1"]  # parsed and compiled
    assert outs[1][0] == ["0", "0"]  # loaded by the file's digest: no parse
    a, b = outs[0][1], outs[1][1]
    assert a.files == b.files and all(a[k].tobytes() == b[k].tobytes() for k in a.files)
