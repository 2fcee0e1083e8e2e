"""Golden-text cases: reading testdata/hlo_text/<pass>/*.hlo, running their pipeline and
matching the result with FileCheck (the `filecheck` package from PyPI, a Python port of
LLVM's FileCheck).

A file holds one or more cases separated by a `// -----` line. A case is an optional
`// RUN: <spec>` line, an HLO module (everything that is not a `//` line), a `// Claim: ...`
comment saying in plain words what the case demonstrates, and CHECK lines, written by a
person, that state exactly that claim and nothing more (see docs/passes.md).

RUN specs are space-separated `key=value` words:
  passes=a,b,c         run these registered passes in order
  pipeline=fusion      the standard pipeline (simplifier, cse, dce, fusion passes, dce)
  pipeline=nofusion    the standard pipeline without the fusion passes
  target=cpu|gpu       target for the pipeline and for passes that take one (default cpu)
  verify=true|false    verify after each pass (default true)
  anything else        an option for the passes that accept it (`max_fold_elements=128`)
Without a RUN line a case runs `pipeline=fusion target=cpu`.

Two ways the `filecheck` package (1.0.6) differs from LLVM's FileCheck, which the checks work
around: a CHECK-NOT is searched up to the END of the next positive match (LLVM stops at its
start), so its pattern must not occur on the line the next CHECK matches; and a `(` inside a
`{{regex}}` (even in a character class like `[^(]`) is counted as a capture group, which shifts
the `[[VAR:...]]` captures of that line, so such regexes avoid `(`.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field

from repo_paths import GOLDEN as _GOLDEN, REPO as _REPO

REPO = str(_REPO)
GOLDEN_DIR = str(_GOLDEN)
SEPARATOR = re.compile(r"^\s*//\s*-----\s*$")
RUN_LINE = re.compile(r"^\s*//\s*RUN:(.*)$")
CLAIM_LINE = re.compile(r"^\s*//\s*Claim:\s*\S")
# The directive syntax FileCheck reads (a check prefix after a non-word character).
DIRECTIVE = re.compile(r"(^|[^a-zA-Z_-])CHECK(-(DAG|COUNT-\d+|NOT|EMPTY|NEXT|SAME|LABEL))?(\{LITERAL\})?:")


class FileCheckFailure(AssertionError):
    """FileCheck rejected an output (or its check lines); the message is FileCheck's diagnosis."""


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
        """`<pass>/<file>.hlo:<index>` for a golden file, `<file>:<index>` for any other."""
        name = os.path.relpath(self.filename, GOLDEN_DIR)
        if name.startswith(".."):
            name = os.path.basename(self.filename)
        return f"{name.replace(os.sep, '/')}:{self.index}"

    def module_text(self) -> str:
        """The module, comment lines blanked so that parse errors give file line numbers."""
        body = ["" if ln.lstrip().startswith("//") else ln for ln in self.lines]
        return "\n" * (self.first_line - 1) + "\n".join(body) + "\n"

    def check_text(self) -> str:
        """The case's lines, padded so that FileCheck's line numbers are the golden file's."""
        return "\n" * (self.first_line - 1) + "\n".join(self.lines) + "\n"

    def check_lines(self) -> list[str]:
        """The lines holding FileCheck directives."""
        return [ln for ln in self.lines if DIRECTIVE.search(ln)]

    def claim(self) -> str:
        """The `// Claim:` comment (continued on the following `//` lines), or ''."""
        out: list[str] = []
        for ln in self.lines:
            if CLAIM_LINE.match(ln):
                out.append(ln.split("Claim:", 1)[1].strip())
            elif out and ln.lstrip().startswith("//") and not DIRECTIVE.search(ln):
                out.append(ln.lstrip()[2:].strip())
            elif out:
                break
        return " ".join(out)


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


def run_case(case: Case, *, run_passes: bool = True) -> str:
    """Parse the case's module, run its pipeline and return the printed result; with
    `run_passes=False` the module is only parsed and printed (the guard that a case's checks
    state something its passes do)."""
    from hlofuse.hlo.parser import parse_hlo

    module = parse_hlo(case.module_text(), filename=case.filename)
    if run_passes:
        build_pipeline(case.options).run(module)
    return module.to_text()


def golden_files(directory: str = GOLDEN_DIR) -> list[str]:
    """Every .hlo file under `directory` (the per-pass folders included), sorted."""
    found: list[str] = []
    for root, _dirs, files in os.walk(directory):
        found += [os.path.join(root, f) for f in files if f.endswith(".hlo")]
    return sorted(found)


def load_cases(directory: str = GOLDEN_DIR) -> list[Case]:
    """Every case of every golden file under `directory`, in file order."""
    cases: list[Case] = []
    for path in golden_files(directory):
        with open(path) as f:
            cases.extend(split_cases(f.read(), path))
    return cases


_SHOWN_LINES = 200  # of the input, in a failure message


def filecheck(output: str, check_text: str, check_name: str = "<checks>") -> None:
    """Match `output` against the CHECK lines of `check_text` with the PyPI `filecheck`
    package; raises FileCheckFailure carrying FileCheck's diagnosis (with `check_name` and
    the check's line in it) when it does not match.

    The package is a command-line tool (`filecheck CHECKFILE < input`); its entry point runs
    in-process here with argv, stdin and stderr redirected, which costs far less than a
    subprocess per case. It exits through SystemExit, with 0 on success."""
    from filecheck.main import main as filecheck_main

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checks")
        with open(path, "w", encoding="utf-8") as f:
            f.write(check_text)
        err, out = io.StringIO(), io.StringIO()
        saved = sys.stdin
        sys.stdin = io.StringIO(output)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                try:
                    filecheck_main(["filecheck", path])
                    code = 0
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else 1
        finally:
            sys.stdin = saved
    if code != 0:
        message = (err.getvalue() + out.getvalue()).replace(path, check_name).rstrip()
        lines = output.splitlines()
        shown = "\n".join(f"{i:4d} | {ln}" for i, ln in enumerate(lines[:_SHOWN_LINES], start=1))
        more = f"\n     ... {len(lines) - _SHOWN_LINES} more lines" if len(lines) > _SHOWN_LINES else ""
        raise FileCheckFailure(f"FileCheck failed (exit {code}):\n{message}\n\ninput:\n{shown}{more}")


def check_case(case: Case, output: str) -> None:
    """FileCheck `output` against the case's CHECK lines (errors name the golden file's lines)."""
    filecheck(output, case.check_text(), case.filename)
