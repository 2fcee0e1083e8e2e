"""`hlofuse compile --dump-dir`: after the pass dumps, the report, schedule, buffer assignment,
each kernel's LLVM IR (before and after optimisation) and assembly or PTX, the fusion graph and
an index.html linking them, all named so that `ls` lists them in pipeline order."""
from __future__ import annotations

import os
import re
from pathlib import Path

import llvmlite.binding as llvm
import pytest

import hlofuse
from hlofuse.cli import main
from hlofuse.compiler import fusion_target, optimize
from hlofuse.passes.pipeline import standard_pipeline

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CASES = [("lstm_cell.hlo", "cpu", ".s"), ("softmax.hlo", "gpu", ".ptx")]


def _dump(tmp_path, name: str, target: str) -> tuple[Path, list[str]]:
    dump = tmp_path / "dump"
    assert main(["compile", str(EXAMPLES / name), "--target", target, "--dump-dir", str(dump)]) == 0
    return dump, sorted(os.listdir(dump))


def _entry_plan(name: str, target: str):
    """The entry computation's plan, from the codegen itself (not from the dump)."""
    fused, _ = optimize(hlofuse.load(str(EXAMPLES / name)), target)
    if target == "gpu":
        from hlofuse.codegen.gpu import compile_gpu

        return fused, compile_gpu(fused, lenient=True)
    from hlofuse.codegen.cpu import compile_cpu

    return fused, compile_cpu(fused, cache=False)


@pytest.mark.parametrize("name,target,machine", CASES)
def test_dump_dir_files_in_pipeline_order(tmp_path, name, target, machine):
    dump, files = _dump(tmp_path, name, target)
    fused, program = _entry_plan(name, target)
    mod = fused.name
    passes = [p.name for p in standard_pipeline(target=fusion_target(target)).passes]
    n = len(passes)
    expected_hlo = [f"0000.{mod}.before_optimizations.hlo"] + [
        f"{k:04d}.{mod}.{p}.hlo" for k, p in enumerate(passes, start=1)]
    assert files[:n + 1] == expected_hlo
    assert files[n + 1:n + 5] == [f"{n + 1:04d}.{mod}.fusion_report.txt", f"{n + 2:04d}.{mod}.fusion_report.json",
                                  f"{n + 3:04d}.{mod}.schedule.txt", f"{n + 4:04d}.{mod}.buffer_assignment.txt"]
    driver = ["native_plan.txt", "driver.ll"] if target == "cpu" else []  # the CPU's native driver
    kernel_files = files[n + 5:len(files) - 2 - len(driver)]
    names = [k.name for k in program.kernels]
    expected_kernels = []
    for k in names:
        expected_kernels += [f"kernel.{k}.unoptimized.ll", f"kernel.{k}.ll", f"kernel.{k}{machine}"]
    assert [f.split(".", 2)[2] for f in kernel_files] == expected_kernels
    assert [f.split(".", 2)[2] for f in files[len(files) - 2 - len(driver):-2]] == driver
    assert [int(f[:4]) for f in files[:-1]] == list(range(len(files) - 1))  # one number each, no gap
    assert files[-2] == f"{len(files) - 2:04d}.{mod}.fusion_graph.html"
    assert files[-1] == "index.html"


@pytest.mark.parametrize("name,target,machine", CASES)
def test_dumped_kernels_are_valid_llvm_ir(tmp_path, name, target, machine):
    dump, files = _dump(tmp_path, name, target)
    lls = [f for f in files if f.endswith(".ll") and ".kernel." in f]
    assert lls
    for driver in [f for f in files if f.endswith(".driver.ll")]:  # the CPU's native driver
        parsed = llvm.parse_assembly((dump / driver).read_text())
        parsed.verify()
        assert not parsed.get_function("hlofuse_plan_0").is_declaration
    for f in lls:
        parsed = llvm.parse_assembly((dump / f).read_text())
        parsed.verify()
        kernel = f.split(".kernel.", 1)[1].removesuffix(".ll").removesuffix(".unoptimized")
        assert parsed.get_function(kernel) is not None  # the kernel's own function is there
        if not f.endswith(".unoptimized.ll"):
            assert not parsed.get_function(kernel).is_declaration
            following = files[files.index(f) + 1]  # the kernel's machine code comes next
            assert following.endswith(f".kernel.{kernel}{machine}")
            code = (dump / following).read_text()
            assert kernel in code


@pytest.mark.parametrize("name,target,machine", CASES)
def test_buffer_assignment_and_schedule_list_every_step(tmp_path, name, target, machine):
    dump, files = _dump(tmp_path, name, target)
    _, program = _entry_plan(name, target)
    entry = program.entry
    buffers = (dump / next(f for f in files if f.endswith(".buffer_assignment.txt"))).read_text()
    schedule = (dump / next(f for f in files if f.endswith(".schedule.txt"))).read_text()
    for i, step in enumerate(entry.steps):
        if step.kind in ("param", "const", "tuple", "gte"):
            continue
        assert re.search(rf"^\s+{i}: {re.escape(step.inst.name)} {step.kind} ", buffers, re.M), step.inst.name
        assert re.search(rf"^\s+{i}\s+{step.kind}\s+{re.escape(step.inst.name)} = ", schedule, re.M)
        for k in step.kernels:
            assert k.name in schedule
    for (i, k), slot in entry.assignment.slots.items():
        if slot.offset is not None:
            assert f"arena+{slot.offset}: " in buffers
    assert f"arena {entry.assignment.arena_bytes} B" in buffers


@pytest.mark.parametrize("name,target,machine", CASES)
def test_index_links_every_file_and_report_text_matches_emit_report(tmp_path, capsys, name, target, machine):
    dump, files = _dump(tmp_path, name, target)
    index = (dump / "index.html").read_text()
    hrefs = re.findall(r'href="([^"]+)"', index) + re.findall(r'src="([^"]+)"', index)
    assert set(files) - {"index.html"} <= set(hrefs)
    for h in hrefs:
        assert not os.path.isabs(h) and (dump / h).is_file()
    capsys.readouterr()
    assert main(["compile", str(EXAMPLES / name), "--target", target, "--emit", "report"]) == 0
    emitted = capsys.readouterr().out
    assert (dump / next(f for f in files if f.endswith(".fusion_report.txt"))).read_text() == emitted


def test_no_dump_dir_writes_nothing_extra(tmp_path, monkeypatch):
    import hlofuse.dump

    def fail(*a, **k):
        raise AssertionError("dump written without --dump-dir")

    monkeypatch.setattr(hlofuse.dump, "write_dump", fail)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(EXAMPLES / "lstm_cell.hlo"), "-o", "out.hlo"]) == 0
    assert os.listdir(tmp_path) == ["out.hlo"]
