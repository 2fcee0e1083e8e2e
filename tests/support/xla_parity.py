"""Agreement with XLA's own fusion unit tests: the data in tests/passes/fusion/xla_cases/.

Each `.hlo` file there transcribes modules from one of XLA's test files (openxla/xla, named in
the file's first line); cases are separated by `// -----` as in the golden files. A case has:

  // XLA: <TestName>                 the XLA test the module comes from
  // RUN: passes=<hlofuse passes> target=gpu|cpu   the hlofuse pass(es) matching the XLA pass
  // EXPECT: {a, b} {c}              what the XLA test asserts, as fusion groups
  // Why: ...                        (optional) the XLA rule the case exercises

An EXPECT group lists the instructions of the INPUT module that end up in one fusion of the
result's entry computation: an entry instruction by its name, anything inside an input fusion
by that fusion's name (parameters, constants, tuples and get-tuple-elements are not listed).
`EXPECT: unchanged` means the pass changes nothing: every input fusion stays a kernel alone
(what `EXPECT_FALSE(pass.Run(module))` asserts). The count claim is the number of groups; the
membership claim is the groups themselves.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from golden_harness import Case, build_pipeline, split_cases
from repo_paths import REPO

CASES_DIR = os.path.join(str(REPO), "tests", "passes", "fusion", "xla_cases")
_IGNORED = {"parameter", "constant", "tuple", "get-tuple-element"}
_GROUP = re.compile(r"\{([^{}]*)\}")

Groups = list[frozenset[str]]


@dataclass
class ParityCase:
    """One transcribed XLA test: its module, the hlofuse passes and XLA's asserted outcome."""

    case: Case
    xla_test: str
    expect: str  # the EXPECT text

    @property
    def id(self) -> str:
        """`<file>:<XLA test name>`."""
        return f"{os.path.basename(self.case.filename)}:{self.xla_test}"


def _comment(case: Case, key: str) -> str:
    for ln in case.lines:
        m = re.match(rf"^\s*//\s*{key}:\s*(.*)$", ln)
        if m:
            return m.group(1).strip()
    return ""


def load_parity_cases(directory: str = CASES_DIR) -> list[ParityCase]:
    """Every case of every file of `directory`, in file order."""
    out: list[ParityCase] = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".hlo"):
            continue
        path = os.path.join(directory, name)
        with open(path) as f:
            for case in split_cases(f.read(), path):
                test, expect = _comment(case, "XLA"), _comment(case, "EXPECT")
                if not test or not expect:
                    raise ValueError(f"{path} case {case.index}: needs // XLA: and // EXPECT: lines")
                out.append(ParityCase(case, test, expect))
    return out


def _owners(module) -> dict:
    """Input instruction -> the name it is listed by (its own, or its enclosing fusion's)."""
    owners = {}
    for inst in module.entry.instructions:
        owners[inst] = inst.name
        if inst.opcode == "fusion":
            stack = [inst.fused_computation]
            while stack:
                comp = stack.pop()
                for inner in comp.instructions:
                    owners[inner] = inst.name
                    if inner.opcode == "fusion":
                        stack.append(inner.fused_computation)
    return owners


def _members(fusion, owners: dict) -> frozenset[str]:
    found: set[str] = set()
    stack = [fusion.fused_computation]
    while stack:
        comp = stack.pop()
        for inner in comp.instructions:
            if inner.opcode == "fusion":
                stack.append(inner.fused_computation)
            if inner.opcode in _IGNORED:
                continue
            name = owners.get(inner.original)
            if name is not None:
                found.add(name)
    return frozenset(found)


def fusion_groups(module, owners: dict) -> Groups:
    """The membership of every fusion of `module`'s entry computation (empty ones left out)."""
    groups = [_members(i, owners) for i in module.entry.instructions if i.opcode == "fusion"]
    return sorted((g for g in groups if g), key=lambda g: sorted(g))


def expected_groups(pc: ParityCase, input_groups: Groups) -> Groups:
    """The groups XLA's test asserts (`unchanged`: the input's own fusions)."""
    if pc.expect.strip() == "unchanged":
        return input_groups
    groups = [frozenset(n.strip() for n in g.split(",") if n.strip()) for g in _GROUP.findall(pc.expect)]
    return sorted(groups, key=lambda g: sorted(g))


@dataclass
class Outcome:
    """hlofuse's result on one case against XLA's."""

    case: ParityCase
    expected: Groups
    got: Groups

    @property
    def count_agrees(self) -> bool:
        """Same number of fusions."""
        return len(self.expected) == len(self.got)

    @property
    def membership_agrees(self) -> bool:
        """Same fusions with the same members."""
        return self.expected == self.got

    def describe(self) -> str:
        """Expected and got, readable."""
        fmt = lambda gs: " ".join("{" + ", ".join(sorted(g)) + "}" for g in gs) or "(none)"  # noqa: E731
        return f"{self.case.id}: XLA asserts {fmt(self.expected)}; hlofuse gives {fmt(self.got)}"


def run_parity_case(pc: ParityCase) -> Outcome:
    """Parse the case's module, run its passes, compare the fusions with XLA's assertion."""
    from hlofuse.hlo.parser import parse_hlo

    module = parse_hlo(pc.case.module_text(), filename=pc.case.filename)
    owners = _owners(module)
    before = fusion_groups(module, owners)
    build_pipeline(pc.case.options).run(module)
    return Outcome(pc, expected_groups(pc, before), fusion_groups(module, owners))


def agreement(outcomes: list[Outcome]) -> tuple[int, int, int]:
    """(cases, count agreements, count-and-membership agreements)."""
    return (len(outcomes), sum(o.count_agrees for o in outcomes), sum(o.membership_agrees for o in outcomes))
