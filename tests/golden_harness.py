"""Golden-text cases: reading testdata/hlo_text/*.hlo, running their pipeline, writing CHECK lines.

A file holds one or more cases separated by a `// -----` line. A case is an optional
`// RUN: <spec>` line, an HLO module (everything that is not a `//` line) and CHECK lines
(tests/filecheck.py) matched against the printed module after the pipeline ran.

RUN specs are space-separated `key=value` words:
  passes=a,b,c         run these registered passes in order
  pipeline=fusion      the standard pipeline (simplifier, cse, dce, fusion passes, dce)
  pipeline=nofusion    the standard pipeline without the fusion passes
  target=cpu|gpu       target for the pipeline and for passes that take one (default cpu)
  verify=true|false    verify after each pass (default true)
  anything else        an option for the passes that accept it (`max_fold_elements=128`)
Without a RUN line a case runs `pipeline=fusion target=cpu`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from filecheck import _DIRECTIVE, Directive, parse_checks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_DIR = os.path.join(REPO, "testdata", "hlo_text")
SEPARATOR = re.compile(r"^\s*//\s*-----\s*$")
RUN_LINE = re.compile(r"^\s*//\s*RUN:(.*)$")


@dataclass
class Case:
    """One case of a golden file; `lines` are its own lines, `first_line` their file position."""

    filename: str
    index: int
    first_line: int
    lines: list[str]
    run: str = ""
    options: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.index}"

    def module_text(self) -> str:
        """The module, comment lines blanked so that parse errors give file line numbers."""
        body = ["" if ln.lstrip().startswith("//") else ln for ln in self.lines]
        return "\n" * (self.first_line - 1) + "\n".join(body) + "\n"

    def checks(self) -> list[Directive]:
        return parse_checks("\n".join(self.lines), self.filename, self.first_line)


def split_cases(text: str, filename: str = "<golden>") -> list[Case]:
    """The cases of a golden file, in order."""
    cases: list[Case] = []
    current: list[str] = []
    start = 1
    for number, line in enumerate(text.splitlines(), start=1):
        if SEPARATOR.match(line):
            cases.append(Case(filename, len(cases), start, current))
            current, start = [], number + 1
        else:
            current.append(line)
    cases.append(Case(filename, len(cases), start, current))
    for case in cases:
        for line in case.lines:
            m = RUN_LINE.match(line)
            if m:
                case.run = m.group(1).strip()
                break
        case.options = parse_run(case.run)
    return [c for c in cases if any(ln.strip() and not ln.lstrip().startswith("//") for ln in c.lines)]


def _value(text: str):
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def parse_run(spec: str) -> dict:
    """The options of a RUN spec (see the module docstring)."""
    options: dict = {}
    for word in spec.split():
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"RUN spec word '{word}' is not key=value")
        options[key] = value if key in ("passes", "pipeline", "target") else _value(value)
    if not options.get("passes") and not options.get("pipeline"):
        options["pipeline"] = "fusion"
    return options


def build_pipeline(options: dict):
    """The PassPipeline a case asks for."""
    from hlofuse.passes.pipeline import PassPipeline, parse_pass_list, standard_pipeline

    opts = dict(options)
    target = opts.pop("target", "cpu")
    verify = bool(opts.pop("verify", True))
    passes = opts.pop("passes", None)
    pipeline = opts.pop("pipeline", None)
    if passes:
        return PassPipeline(parse_pass_list(passes, defaults={"target": target}, **opts), verify=verify)
    if pipeline not in ("fusion", "nofusion", "standard"):
        raise ValueError(f"unknown pipeline '{pipeline}' (expected fusion or nofusion)")
    return standard_pipeline(target=target, fusion=pipeline != "nofusion", verify=verify)


def run_case(case: Case) -> str:
    """Parse the case's module, run its pipeline and return the printed result."""
    from hlofuse.hlo.parser import parse_hlo

    module = parse_hlo(case.module_text(), filename=case.filename)
    build_pipeline(case.options).run(module)
    return module.to_text()


def golden_files(directory: str = GOLDEN_DIR) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".hlo"))


# ---- generating CHECK lines -------------------------------------------------------------------

_HEADER = re.compile(r"^(ENTRY )?%([^\s(]+) \(")
_NAME = re.compile(r"%([A-Za-z0-9_.\-]+)")
_DEF = re.compile(r"^(\s*(?:ROOT )?)%([A-Za-z0-9_.\-]+) = ")
_SPECIAL_RUN = re.compile(r"[{}\[\]]+")


def _escape_literal(text: str, before_var: bool) -> str:
    """Literal text as a pattern: runs of braces/brackets that FileCheck would read as `{{`,
    `}}` or `[[` become a regex block."""

    def fix(m: re.Match) -> str:
        run = m.group(0)
        at_end = m.end() == len(text)
        risky = "{{" in run or "}}" in run or "[[" in run or (before_var and at_end and run.endswith("["))
        if not risky:
            return run
        return "{{" + "".join("\\" + c for c in run) + "}}"

    return _SPECIAL_RUN.sub(fix, text)


def _var_name(name: str, taken: dict[str, str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
    if not base or base[0].isdigit():
        base = "V_" + base
    candidate, k = base, 1
    used = set(taken.values())
    while candidate in used:
        k += 1
        candidate = f"{base}_{k}"
    return candidate


def _line_pattern(line: str, variables: dict[str, str]) -> str:
    """A CHECK pattern for one printed instruction line, its names captured as variables."""
    out: list[str] = []
    rest = line.strip()
    m = _DEF.match(rest)
    if m:
        name = m.group(2)
        var = variables.get(name) or _var_name(name, variables)
        variables[name] = var
        out.append(_escape_literal(m.group(1), True) + f"[[{var}:%[^ ]+]] = ")
        rest = rest[m.end():]
    pos = 0
    for u in _NAME.finditer(rest):
        if u.group(1) not in variables:
            continue
        out.append(_escape_literal(rest[pos:u.start()], True))
        out.append(f"[[{variables[u.group(1)]}]]")
        pos = u.end()
    out.append(_escape_literal(rest[pos:], False))
    return "".join(out).strip()


def generate_checks(output: str) -> list[str]:
    """CHECK lines for a printed module: a CHECK-LABEL per computation, a CHECK-NEXT per line
    of its body, instruction names captured as [[VARS]], and a CHECK-NOT after its closing
    brace so that an extra computation fails too."""
    checks: list[str] = []
    variables: dict[str, str] = {}
    in_body = False
    for line in output.splitlines():
        header = _HEADER.match(line)
        if header:
            entry = "ENTRY " if header.group(1) else ""
            checks.append(f"// CHECK-LABEL: {{{{^}}}}{entry}%{header.group(2)} (")
            in_body = True
            continue
        if not in_body:
            continue
        if line.strip() == "}":
            # ... and nothing else before the next computation's label (or the end).
            checks += ["// CHECK-NEXT: {{^}}}", "// CHECK-NOT: {{\\S}}"]
            in_body = False
            continue
        checks.append(f"// CHECK-NEXT: {_line_pattern(line, variables)}")
    return checks


def rewrite_checks(text: str, filename: str = "<golden>") -> str:
    """`text` with each case's CHECK lines replaced by ones generated from the current output."""
    out_cases: list[str] = []
    for case in split_cases(text, filename):
        kept = [ln for ln in case.lines if not _DIRECTIVE.search(ln)]
        while kept and not kept[-1].strip():
            kept.pop()
        body = "\n".join(kept + [""] + generate_checks(run_case(case)))
        out_cases.append(body.strip("\n"))
    return "\n\n// -----\n\n".join(out_cases) + "\n"
