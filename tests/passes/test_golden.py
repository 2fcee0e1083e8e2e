"""Golden-text tests: every case of testdata/hlo_text/<pass>/*.hlo, run and matched by FileCheck
(the PyPI `filecheck` package), and the guard that each case's checks fail when its passes do
not run, so that every golden states something its pass does."""
from __future__ import annotations

import os
import re

import pytest

from golden_harness import (DIRECTIVE, GOLDEN_DIR, Case, FileCheckFailure, check_case, filecheck, load_cases,
                            parse_run, run_case, split_cases)

CASES = load_cases()

# Cases whose checks hold on the input as written, with the reason. Their claim is that the
# pass leaves something alone, so their checks cannot fail when the pass does not run; each
# still has to pass with its passes (test_golden) and is checked to pass without them below,
# so that the list stays exact.
HOLDS_WITHOUT_THE_PASS: dict[str, str] = {
    "cse/basic.hlo:1": "nothing merges: instructions that differ in operand order, slice bounds or comparison direction stay apart",
    "cse/side_effects.hlo:0": "nothing merges: side-effecting instructions are never merged",
    "simplifier/fold.hlo:2": "nothing folds: the constant expression is over the folding budget",
    "simplifier/fold.hlo:3": "nothing folds: converts and integer divisions where numpy and XLA could disagree stay",
    "simplifier/noops.hlo:1": "nothing is removed: each look-alike of a no-op changes the value",
    "fusion/budget.hlo:1": "nothing fuses: the CPU's concatenate operand limit",
    "fusion/cpu.hlo:2": "nothing fuses: the expensive bf16 convert has a user that cannot fuse it",
    "fusion/cpu.hlo:7": "nothing fuses: the CPU leaves a large minor-dimension concatenate alone",
    "fusion/cpu.hlo:9": "nothing fuses: the exponential is an output and is not duplicated",
    "fusion/duplication.hlo:3": "nothing fuses: the f64 exponential is expensive and also an output",
    "fusion/duplication.hlo:5": "nothing fuses: duplicating the division into five users is over the cost bound",
    "fusion/duplication.hlo:6": "nothing fuses: the add has a user that cannot fuse it",
    "fusion/in_place.hlo:2": "the scatter takes nothing: it updates a in place and also reads a as its updates",
    "fusion/merger.hlo:0": "nothing merges: r would read x at 16 indices, past the merger's limit of 15",
    "fusion/multi_output.hlo:7": "nothing fuses: multi-output fusion would create a cycle through the custom-call",
    "fusion/multi_output.hlo:8": "nothing fuses: a reduction is not a multi-output producer for its elementwise users",
    "fusion/never.hlo:0": "nothing fuses: dot is never fused (and abs/negate alone make no fusion)",
    "fusion/never.hlo:1": "nothing fuses: convolution is never fused",
    "fusion/never.hlo:2": "nothing fuses: custom-call is never fused",
    "fusion/never.hlo:3": "nothing fuses: sort is never fused",
    "fusion/producer_consumer.hlo:3": "nothing fuses: a scalar constant alone does not make a fusion",
    "fusion/reduce.hlo:2": "nothing fuses: the GPU does not fuse a row reduction into an elementwise consumer",
    "fusion/reduce.hlo:5": "nothing fuses: a transposing producer would break the reduction's coalescing",
}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case: Case):
    assert case.claim(), f"{case.id}: a golden case says what it demonstrates in a `// Claim:` comment"
    assert case.check_lines(), f"{case.id}: a golden case needs CHECK lines stating its claim"
    check_case(case, run_case(case))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden_checks_fail_without_the_passes(case: Case):
    """The case's module, parsed and printed with no pass run, fails its checks: the checks
    state something the passes do (or the case is listed in HOLDS_WITHOUT_THE_PASS)."""
    unchanged = run_case(case, run_passes=False)
    if case.id in HOLDS_WITHOUT_THE_PASS:
        check_case(case, unchanged)
        return
    with pytest.raises(FileCheckFailure):
        check_case(case, unchanged)


def test_holds_without_the_pass_names_existing_cases():
    ids = {c.id for c in CASES}
    assert not set(HOLDS_WITHOUT_THE_PASS) - ids
    assert all(reason.strip() for reason in HOLDS_WITHOUT_THE_PASS.values())


_CHECKISH = re.compile(r"//\s*CHECK")
_WELL_FORMED = re.compile(r"^\s*// CHECK(-(DAG|NOT|NEXT|SAME|LABEL|COUNT-[1-9][0-9]*))?: ?\S|^\s*// CHECK-EMPTY:\s*$")
_COMMENTED_OUT = re.compile(r"(COM|RUN).*CHECK")  # FileCheck skips such lines as comments


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden_check_lines_are_well_formed(case: Case):
    """Every line that looks like a check is one FileCheck reads: a misspelt directive
    (`CHECK-NOTT:`, `CHECK :`) or a `RUN`/`COM` before `CHECK` would be skipped silently."""
    for n, line in enumerate(case.lines, start=case.first_line):
        if not _CHECKISH.search(line):
            continue
        where = f"{case.filename}:{n}: {line.strip()}"
        assert _WELL_FORMED.match(line), f"not a directive FileCheck reads: {where}"
        assert DIRECTIVE.search(line) and not _COMMENTED_OUT.search(line), f"skipped by FileCheck: {where}"
        assert "[[#" not in line, f"numeric substitutions are not supported by filecheck: {where}"


def test_goldens_live_in_per_pass_folders():
    top = [f for f in os.listdir(GOLDEN_DIR) if f.endswith(".hlo")]
    assert not top, f"golden files go in testdata/hlo_text/<pass>/: {top}"
    folders = {os.path.relpath(os.path.dirname(c.filename), GOLDEN_DIR) for c in CASES}
    for name in ("dce", "cse", "simplifier", "batchnorm_expander", "fusion"):
        assert name in folders, name


# ---- the harness itself -------------------------------------------------------------------------

SAMPLE = """\
// RUN: passes=dce
HloModule m

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %unused = f32[4]{0} negate(f32[4]{0} %p)
  ROOT %e = f32[4]{0} exponential(f32[4]{0} %p)
}
// Claim: the unused negate is removed,
// the exponential stays.
// CHECK-NOT: negate

// -----

// RUN: passes=simplifier,dce target=gpu max_fold_elements=8
HloModule n

ENTRY %main (p: f32[2]) -> f32[2] {
  ROOT %p = f32[2]{0} parameter(0)
}
// CHECK: parameter(0)
"""


def test_split_cases_and_run_specs():
    cases = split_cases(SAMPLE, "sample.hlo")
    assert [c.id for c in cases] == ["sample.hlo:0", "sample.hlo:1"]
    assert cases[0].options == {"passes": "dce"}
    assert cases[1].options == {"passes": "simplifier,dce", "target": "gpu", "max_fold_elements": 8}
    assert cases[1].first_line == 14  # the blank line after the separator
    # parse errors and check failures point at file lines
    assert cases[1].module_text().splitlines()[15] == "HloModule n"  # file line 16
    assert cases[0].check_text().splitlines()[10] == "// CHECK-NOT: negate"  # file line 11
    assert cases[1].check_text().splitlines()[20] == "// CHECK: parameter(0)"  # file line 21
    assert cases[0].check_lines() == ["// CHECK-NOT: negate"]
    assert cases[0].claim() == "the unused negate is removed, the exponential stays."
    assert cases[1].claim() == ""


def test_default_run_is_the_fusion_pipeline():
    assert parse_run("") == {"pipeline": "fusion"}
    assert parse_run("target=gpu") == {"pipeline": "fusion", "target": "gpu"}
    with pytest.raises(ValueError):
        parse_run("passes")


def test_a_case_passes_with_its_pass_and_fails_without_it():
    case = split_cases(SAMPLE, "sample.hlo")[0]
    check_case(case, run_case(case))
    with pytest.raises(FileCheckFailure) as info:
        check_case(case, run_case(case, run_passes=False))
    msg = str(info.value)
    # FileCheck's diagnosis names the golden file and the line of the failing check, and the
    # message shows the input it was matched against
    assert "sample.hlo:11" in msg and "negate" in msg
    assert "input:" in msg and "| ENTRY %main" in msg


OUT = """\
ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %e = f32[4]{0} exponential(f32[4]{0} %p)
  ROOT %a = f32[4]{0} add(f32[4]{0} %e, f32[4]{0} %p)
}
"""


@pytest.mark.parametrize("checks", [
    "// CHECK: parameter(0)\n// CHECK: exponential\n// CHECK: add(",
    "// CHECK: [[P:%[a-z]+]] = {{.*}}parameter\n// CHECK-NEXT: exponential({{.*}} [[P]])",
    "// CHECK: %e =\n// CHECK-SAME: exponential(",
    "// CHECK-LABEL: ENTRY %main\n// CHECK-DAG: add(\n// CHECK-DAG: exponential(\n// CHECK-NOT: negate",
    "// CHECK: exponential\n// CHECK-NOT: parameter\n// CHECK: add(",
])
def test_filecheck_directives_we_use_pass(checks: str):
    filecheck(OUT, checks)


@pytest.mark.parametrize("checks,needle", [
    ("// CHECK: add(\n// CHECK: exponential", "exponential"),
    ("// CHECK: [[P:%[a-z]+]] = {{.*}}parameter\n// CHECK: add({{.*}} [[P]], ", "[[P]]"),
    ("// CHECK: parameter\n// CHECK-NEXT: add(", "add("),
    ("// CHECK: %e =\n// CHECK-SAME: add(", "add("),
    ("// CHECK: parameter\n// CHECK-NOT: exponential\n// CHECK: add(", "exponential"),
    ("// CHECK-LABEL: ENTRY %main\n// CHECK-DAG: negate(\n// CHECK-DAG: add(", "negate("),
    ("// CHECK: {{exp|log}}onential(\n// CHECK: ROOT\n// CHECK-NOT: }", "}"),
    ("no directives at all", "No check strings"),
])
def test_filecheck_directives_we_use_fail(checks: str, needle: str):
    with pytest.raises(FileCheckFailure) as info:
        filecheck(OUT, checks, "sample.hlo")
    assert needle in str(info.value), str(info.value)


def test_parse_errors_point_at_the_golden_file_line():
    from hlofuse.hlo.errors import HloParseError

    text = SAMPLE + "\n// -----\n\n// RUN: passes=dce\nHloModule bad\n\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] bogus-op()\n}\n"
    case = split_cases(text, "bad.hlo")[2]
    with pytest.raises(HloParseError) as info:
        run_case(case)
    assert info.value.line == text.splitlines().index("  ROOT %c = f32[] bogus-op()") + 1
    assert "bad.hlo" in str(info.value)


def test_update_golden_prints_outputs_and_never_writes(capsys):
    """scripts/update_golden.py shows a case's claim and output (and its check result), and
    leaves the golden file as it was."""
    import importlib.util

    path = os.path.join(GOLDEN_DIR, "dce", "basic.hlo")
    spec = importlib.util.spec_from_file_location("update_golden", os.path.join(GOLDEN_DIR, "..", "..", "scripts",
                                                                                "update_golden.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    before = open(path).read()
    assert script.main([f"{path}:1", "--check"]) == 0
    out = capsys.readouterr().out
    assert "===== dce/basic.hlo:1" in out and "// Claim:" in out and "ROOT %t" in out and "checks pass" in out
    assert "dce/basic.hlo:0" not in out
    assert open(path).read() == before
