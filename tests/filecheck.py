"""A small, in-process FileCheck with LLVM's directive semantics.

Checks are `// CHECK...:` lines (anywhere in a line, after a non-word character). Supported:

  CHECK:        the pattern occurs after the previous match
  CHECK-NEXT:   ... and on the line right after the previous match
  CHECK-SAME:   ... and on the same line as the previous match
  CHECK-EMPTY:  the line after the previous match is empty
  CHECK-NOT:    the pattern does not occur between the previous and the next match
  CHECK-DAG:    a run of DAG directives matches in any order (matches may not overlap)
  CHECK-LABEL:  splits the input into blocks first; the checks between two labels must
                match between the two label matches

Patterns are literal text with `{{regex}}`, `[[VAR:regex]]` (capture) and `[[VAR]]` (use of an
earlier capture). As in LLVM, runs of horizontal whitespace in the literal text match any run
of horizontal whitespace, and leading/trailing whitespace of a pattern is ignored.

The PyPI `filecheck` package (a port used by xDSL) was evaluated: it works on files and writes
its diagnostics to stderr, which makes it awkward for golden files holding several cases and
for pytest failure messages; this module keeps everything in memory and raises one exception
that carries the whole diagnosis.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

KINDS = ("CHECK", "CHECK-NEXT", "CHECK-SAME", "CHECK-EMPTY", "CHECK-NOT", "CHECK-DAG", "CHECK-LABEL")
_DIRECTIVE = re.compile(r"(?<![\w-])(CHECK(?:-NEXT|-SAME|-EMPTY|-NOT|-DAG|-LABEL)?):(.*)$")
_VAR_NAME = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*")
_HSPACE = re.compile(r"[ \t]+")


class FileCheckError(AssertionError):
    """A check that failed, or a malformed check file; the message is the whole diagnosis."""


@dataclass
class Directive:
    """One check line: its kind, its pattern text and where it was written."""

    kind: str
    pattern: str
    line: int  # 1-based line in the check file
    source: str = ""  # the check line as written
    filename: str = "<checks>"

    def where(self) -> str:
        return f"{self.filename}:{self.line}"


def parse_checks(text: str, filename: str = "<checks>", first_line: int = 1) -> list[Directive]:
    """The directives written in `text`, in order; FileCheckError for malformed ones."""
    out: list[Directive] = []
    for offset, raw in enumerate(text.splitlines()):
        m = _DIRECTIVE.search(raw)
        if not m:
            continue
        kind, pattern = m.group(1), m.group(2).strip()
        d = Directive(kind, pattern, first_line + offset, raw.strip(), filename)
        if kind == "CHECK-EMPTY":
            if pattern:
                raise FileCheckError(f"{d.where()}: error: CHECK-EMPTY takes no pattern\n{d.source}")
        elif not pattern:
            raise FileCheckError(f"{d.where()}: error: found empty check string with prefix '{kind}:'\n{d.source}")
        if kind == "CHECK-LABEL" and "[[" in pattern:
            # Labels are matched before the checks between them, so no variable is bound yet.
            raise FileCheckError(f"{d.where()}: error: CHECK-LABEL may not define or use variables\n{d.source}")
        out.append(d)
    return out


# ---- patterns ---------------------------------------------------------------------------------

@dataclass
class _Compiled:
    regex: re.Pattern
    defines: dict[str, str]  # variable name -> regex group name


def _find_var_end(p: str, start: int) -> int:
    """Index of the `]]` closing a `[[` whose body starts at `start` (brackets in it balanced)."""
    depth = 0
    i = start
    while i < len(p):
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            depth += 1
        elif c == "]":
            if depth == 0 and p.startswith("]]", i):
                return i
            depth -= 1
        i += 1
    return -1


def _literal(text: str) -> str:
    parts = _HSPACE.split(text)
    return r"[ \t]+".join(re.escape(p) for p in parts)


def compile_pattern(d: Directive, variables: dict[str, str]) -> _Compiled:
    """The Python regex for a directive's pattern, given the variables captured so far."""
    p = d.pattern
    out: list[str] = []
    defines: dict[str, str] = {}
    i = 0
    lit_start = 0

    def flush(end: int) -> None:
        if end > lit_start:
            out.append(_literal(p[lit_start:end]))

    while i < len(p):
        if p.startswith("{{", i):
            end = p.find("}}", i + 2)
            if end < 0:
                raise FileCheckError(f"{d.where()}: error: '{{{{' without matching '}}}}'\n{d.source}")
            while p.startswith("}", end + 2):  # `{{a{2}}}`: the regex ends at the last brace pair
                end += 1
            flush(i)
            body = p[i + 2:end]
            _check_regex(body, d)
            out.append("(?:" + body + ")")
            i = lit_start = end + 2
        elif p.startswith("[[", i):
            end = _find_var_end(p, i + 2)
            if end < 0:
                raise FileCheckError(f"{d.where()}: error: '[[' without matching ']]'\n{d.source}")
            flush(i)
            body = p[i + 2:end]
            if body.startswith("#"):
                raise FileCheckError(f"{d.where()}: error: numeric substitution [[#...]] is not supported\n{d.source}")
            name, sep, rx = body.partition(":")
            if not _VAR_NAME.fullmatch(name):
                raise FileCheckError(f"{d.where()}: error: invalid variable name '{name}'\n{d.source}")
            if sep:
                _check_regex(rx, d)
                group = f"v{len(defines)}"
                defines[name] = group
                out.append(f"(?P<{group}>{rx})")
            elif name in defines:  # defined earlier on the same line
                out.append(f"(?P={defines[name]})")
            elif name in variables:
                out.append(re.escape(variables[name]))
            else:
                raise FileCheckError(f"{d.where()}: error: use of undefined variable '{name}'\n{d.source}")
            i = lit_start = end + 2
        else:
            i += 1
    flush(len(p))
    return _Compiled(re.compile("".join(out), re.MULTILINE), defines)


def _check_regex(rx: str, d: Directive) -> None:
    try:
        re.compile(rx)
    except re.error as e:
        raise FileCheckError(f"{d.where()}: error: invalid regex '{rx}': {e}\n{d.source}") from None


# ---- matching ---------------------------------------------------------------------------------

@dataclass
class _State:
    text: str
    variables: dict[str, str] = field(default_factory=dict)


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _numbered(text: str, limit: int = 400) -> str:
    lines = text.splitlines()
    shown = [f"{i + 1:5d} | {ln}" for i, ln in enumerate(lines[:limit])]
    if len(lines) > limit:
        shown.append(f"      | ... {len(lines) - limit} more lines")
    return "\n".join(shown)


def _fail(state: _State, d: Directive, message: str, pos: int, end: int | None = None,
          found: tuple[int, int] | None = None) -> FileCheckError:
    text = state.text
    line, col = _line_col(text, pos)
    src_line = text.splitlines()[line - 1] if text and line <= len(text.splitlines()) else ""
    parts = [
        f"{d.where()}: error: {d.kind}: {message}",
        f"  {d.source}",
        f"<output>:{line}:{col}: note: scanning from here",
        f"  {src_line}",
        "  " + " " * (col - 1) + "^",
    ]
    if found is not None:
        fl, fc = _line_col(text, found[0])
        parts.append(f"<output>:{fl}:{fc}: note: found here: {text[found[0]:found[1]]!r}")
    else:
        hint = _closest_line(text, pos, end, d.pattern)
        if hint is not None:
            parts.append(f"<output>:{hint[0]}: note: possible intended match: {hint[1]}")
    if state.variables:
        parts.append("variables: " + ", ".join(f"{k}={v!r}" for k, v in sorted(state.variables.items())))
    parts.append("output:\n" + _numbered(text))
    return FileCheckError("\n".join(parts))


def _closest_line(text: str, pos: int, end: int | None, pattern: str) -> tuple[int, str] | None:
    lines = text[pos:end].splitlines()
    best, best_score = None, 0.5
    first = text.count("\n", 0, pos) + 1
    for k, ln in enumerate(lines[:2000]):
        score = difflib.SequenceMatcher(None, pattern, ln.strip()).ratio()
        if score > best_score:
            best, best_score = (first + k, ln.strip()), score
    return best


def _search(state: _State, d: Directive, start: int, end: int):
    compiled = compile_pattern(d, state.variables)
    return compiled, compiled.regex.search(state.text, start, end)


def _bind(state: _State, compiled: _Compiled, m: re.Match) -> None:
    for name, group in compiled.defines.items():
        state.variables[name] = m.group(group)


def _check_nots(state: _State, nots: list[Directive], start: int, end: int) -> None:
    for d in nots:
        _, m = _search(state, d, start, end)
        if m is not None:
            raise _fail(state, d, "excluded string found in input", start, end, found=(m.start(), m.end()))


def _match_block(state: _State, checks: list[Directive], start: int, end: int) -> None:
    """Match the non-label directives of one block within text[start:end]."""
    pos = start  # end of the previous match
    i = 0
    while i < len(checks):
        # CHECK-NOTs apply between the previous match and the next positive one.
        nots: list[Directive] = []
        while i < len(checks) and checks[i].kind == "CHECK-NOT":
            nots.append(checks[i])
            i += 1
        if i == len(checks):
            _check_nots(state, nots, pos, end)
            return
        d = checks[i]
        if d.kind == "CHECK-DAG":
            group: list[Directive] = []
            while i < len(checks) and checks[i].kind == "CHECK-DAG":
                group.append(checks[i])
                i += 1
            first, last = _match_dag(state, group, pos, end)
            _check_nots(state, nots, pos, first)
            pos = last
            continue
        if d.kind == "CHECK-EMPTY":
            nl = state.text.find("\n", pos, end)
            ok = nl >= 0 and (nl + 1 == len(state.text) or state.text.startswith("\n", nl + 1))
            if not ok:
                raise _fail(state, d, "the line after the previous match is not empty", pos, end)
            _check_nots(state, nots, pos, nl + 1)
            pos = nl + 1
            i += 1
            continue
        compiled, m = _search(state, d, pos, end)
        if m is None:
            raise _fail(state, d, "expected string not found in input", pos, end)
        newlines = state.text.count("\n", pos, m.start())
        if d.kind == "CHECK-NEXT" and newlines != 1:
            what = "is on the same line as the previous match" if newlines == 0 else "is not on the line after the previous match"
            raise _fail(state, d, what, pos, end, found=(m.start(), m.end()))
        if d.kind == "CHECK-SAME" and newlines != 0:
            raise _fail(state, d, "is not on the same line as the previous match", pos, end, found=(m.start(), m.end()))
        _check_nots(state, nots, pos, m.start())
        _bind(state, compiled, m)
        pos = m.end()
        i += 1


def _match_dag(state: _State, group: list[Directive], start: int, end: int) -> tuple[int, int]:
    """Match a run of CHECK-DAGs in any order without overlaps; return (first start, last end)."""
    taken: list[tuple[int, int]] = []
    for d in group:
        compiled = compile_pattern(d, state.variables)
        search_from = start
        while True:
            m = compiled.regex.search(state.text, search_from, end)
            if m is None:
                raise _fail(state, d, "expected string not found in input", start, end)
            clash = next(((a, b) for a, b in taken if m.start() < b and a < m.end()), None)
            if clash is None:
                break
            search_from = max(clash[1], m.start() + 1)
        taken.append((m.start(), m.end()))
        _bind(state, compiled, m)
    return min(a for a, _ in taken), max(b for _, b in taken)


def check(output: str, checks: str | list[Directive], filename: str = "<checks>") -> None:
    """Match `output` against the checks (text or parsed directives); raise FileCheckError if it fails."""
    directives = parse_checks(checks, filename) if isinstance(checks, str) else list(checks)
    if not directives:
        raise FileCheckError(f"{filename}: error: no check strings found with prefix 'CHECK'")
    first = directives[0]
    if first.kind in ("CHECK-NEXT", "CHECK-SAME", "CHECK-EMPTY"):
        raise FileCheckError(f"{first.where()}: error: found '{first.kind}' without previous 'CHECK:' line\n{first.source}")
    state = _State(output)
    # Split the directives into blocks at the labels.
    blocks: list[tuple[Directive | None, list[Directive]]] = [(None, [])]
    for d in directives:
        if d.kind == "CHECK-LABEL":
            blocks.append((d, []))
        else:
            blocks[-1][1].append(d)
    if not blocks[0][1]:
        blocks.pop(0)
    # Labels are found in order first; each bounds the block before it.
    pos = 0
    label_spans: list[tuple[int, int]] = []
    for label, _ in blocks:
        if label is None:
            label_spans.append((0, 0))
            continue
        compiled, m = _search(state, label, pos, len(output))
        if m is None:
            raise _fail(state, label, "expected string not found in input", pos)
        label_spans.append((m.start(), m.end()))
        pos = m.end()
    for k, (_, body) in enumerate(blocks):
        start = label_spans[k][1]
        end = label_spans[k + 1][0] if k + 1 < len(blocks) else len(output)
        _match_block(state, body, start, end)
