"""Constant literals: HLO text <-> numpy arrays, in XLA's notation.

`{ { 1, 2 }, { 3, 4 } }` for f32[2,2], `(1, -2.5)` for complex, `true`/`false` or `1`/`0` for
pred, `inf`, `-inf`, `nan`, `-nan`, and `{...}` for an elided value (None).
"""
from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np

from .shapes import ArrayShape, Shape, TupleShape

_TOKENS = re.compile(r"/\*.*?\*/|//[^\n\r]*|(\{|\}|\(|\)|,|[^\s{}(),/]+|/)", re.S)
_INT = re.compile(r"[-+]?\d+$")
_FLOAT_RE = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)"
_FLOAT = re.compile(_FLOAT_RE)
_FLOATS = re.compile(f"(?:{_FLOAT_RE})(?: (?:{_FLOAT_RE}))*")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n\r]*", re.S)
_ATOM = re.compile(r"[^\s{}(),/]+")
# A NaN with an explicit payload, `-nan(0x7f)` (the tokenizer splits it at the parentheses).
_NAN_PAYLOAD = re.compile(r"([-+]?)nan\(0x([0-9a-fA-F]+)\)$")


def _skeleton(dims: tuple[int, ...]) -> str:
    """The literal text of an array of `dims` with every number written `n`, no blanks."""
    s = "n"
    for d in reversed(dims):
        s = "{" + ",".join([s] * d) + "}"
    return s


def _s(shape: Shape) -> str:
    return shape.to_text(with_layout=False)


class LiteralError(ValueError):
    """A malformed literal; the parser turns it into an HloParseError at the constant.

    `offset` is where in the literal's text the problem lies (the parser adds it to the
    literal's own position, so the error points at the offending token)."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


def parse_literal(text: str, shape: Shape):
    """The value of literal `text` for `shape`: a numpy array of the element type's dtype,
    a tuple of values for a tuple shape, or None for an elided `{...}`.

    What XLA's parser accepts is accepted with XLA's value: commas between array elements are
    optional (`{1 2}`, `{1, 2,}`), and a lone real number for an array shape sets element 0
    and leaves the others zero (`f32[3] constant(7)` is `{7, 0, 0}`).
    """
    stripped = text.strip()
    if stripped in ("{...}", "..."):
        return None
    if isinstance(shape, ArrayShape) and shape.rank and not shape.dtype.is_complex:
        # Fast path for big arrays: check the brace structure as one string, convert in bulk.
        body = _COMMENT.sub(" ", text) if "/" in text else text
        atoms = _ATOM.findall(body)
        if len(atoms) == shape.element_count() and 0 not in shape.dims:
            skeleton = "".join(_ATOM.sub("n", body).split())
            if skeleton == _skeleton(shape.dims):
                return _to_numpy(atoms, shape)
    tokens = [(m.group(1), m.start()) for m in _TOKENS.finditer(text) if m.group(1)]
    reader = _Reader(tokens, len(text))
    value = reader.value(shape)
    if reader.i != len(tokens):
        raise LiteralError(f"unexpected '{tokens[reader.i][0]}' after the literal of {_s(shape)}", reader.offset())
    return value


class _Reader:
    """Reads tokens of a literal, each with its offset in the literal's text."""

    def __init__(self, tokens: list[tuple[str, int]], end: int) -> None:
        self.tokens = tokens
        self.end = end
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else ""

    def offset(self) -> int:
        """Where the next token starts (the text's end when none is left)."""
        return self.tokens[self.i][1] if self.i < len(self.tokens) else self.end

    def fail(self, message: str) -> LiteralError:
        """An error at the next token."""
        return LiteralError(message, self.offset())

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if expected is not None and tok != expected:
            raise self.fail(f"expected '{expected}' in literal but found {repr(tok) if tok else 'its end'}")
        if not tok:
            raise self.fail("literal ends too early")
        self.i += 1
        return tok

    def value(self, shape: Shape):
        if isinstance(shape, TupleShape):
            self.take("(")
            out = []
            for k, elem in enumerate(shape.elements):
                if k:
                    self.take(",")
                out.append(self.value(elem))
            self.take(")")
            return tuple(out)
        if not isinstance(shape, ArrayShape):
            raise self.fail(f"a constant cannot have shape {_s(shape)}")
        complex_ = shape.dtype.is_complex
        if shape.rank == 0:
            if self.peek() == "{":
                raise self.fail(f"a literal of {_s(shape)} is a single value, not an array in braces")
            return _to_numpy([self.scalar(complex_)], shape)
        if self.peek() != "{":
            return self.lone_scalar(shape)
        return _to_numpy(self.array(shape), shape)

    def lone_scalar(self, shape: ArrayShape) -> np.ndarray:
        """XLA reads one real number for an array shape as element 0, the rest zero."""
        if shape.dtype.is_complex:
            raise self.fail(f"a literal of {_s(shape)} must be an array in braces")
        n = shape.element_count()
        if n == 0:
            raise self.fail(f"a single value cannot initialize {_s(shape)}: it has no elements")
        where = self.offset()
        first = self.scalar(False)
        try:
            arr = np.zeros(n, dtype=shape.dtype.numpy)  # calloc'd: pages are only touched when used
        except (ValueError, MemoryError):
            raise self.fail(f"a literal of {_s(shape)} ({n} elements) is too large to build on this machine") from None
        try:
            arr[0] = _to_numpy([first], shape.with_dims(()))
        except LiteralError as e:
            raise LiteralError(str(e), where) from None
        return arr.reshape(shape.dims)

    def scalar(self, complex_: bool):
        if complex_:
            self.take("(")
            re_ = self.take()
            self.take(",")
            im = self.take()
            self.take(")")
            return (re_, im)
        tok = self.peek()
        if tok in ("{", "}", "(", ")", ","):
            raise self.fail(f"expected a number but found {repr(tok) if tok else 'the end of the literal'}")
        self.i += 1
        if tok.lstrip("-+") == "nan" and self.peek() == "(":
            self.take("(")
            tok += "(" + self.take() + ")"
            self.take(")")
        return tok

    def array(self, shape: ArrayShape) -> list:
        """The elements of an array literal in braces, in order. Iterative, like XLA's
        ParseDenseLiteral: each `{` opens the next dimension and each `}` checks that the
        dimension it closes got exactly its size; commas are skipped wherever they are."""
        dims, rank = shape.dims, shape.rank
        complex_ = shape.dtype.is_complex
        seen = [0] * rank  # elements seen so far in the open brace of each dimension
        flat: list = []
        level = 0
        while True:
            tok = self.peek()
            if tok == "{":
                if level == rank:
                    raise self.fail(f"literal of {_s(shape)} is nested deeper than its rank {rank}")
                if level:
                    seen[level - 1] += 1
                    if seen[level - 1] > dims[level - 1]:
                        raise self.fail(f"literal of {_s(shape)} has more than {dims[level - 1]} elements in "
                                        f"dimension {level - 1}")
                level += 1
                self.i += 1
            elif tok == "}":
                level -= 1
                if seen[level] != dims[level]:
                    raise self.fail(f"literal of {_s(shape)} has {seen[level]} elements in dimension {level}, "
                                    f"expected {dims[level]}")
                seen[level] = 0
                self.i += 1
                if level == 0:
                    return flat
            elif tok == ",":
                self.i += 1
            elif not tok:
                raise self.fail(f"literal of {_s(shape)} ends before its '}}'")
            else:
                if level != rank:
                    raise self.fail(f"literal of {_s(shape)} has a value at nesting depth {level}; its values "
                                    f"belong at depth {rank}, in braces for every dimension")
                seen[rank - 1] += 1
                if seen[rank - 1] > dims[rank - 1]:
                    raise self.fail(f"literal of {_s(shape)} has more than {dims[rank - 1]} elements in "
                                    f"dimension {rank - 1}")
                flat.append(self.scalar(complex_))


def _number(tok: str, shape: ArrayShape):
    t = shape.dtype
    if t.is_pred:
        if tok in ("true", "1"):
            return True
        if tok in ("false", "0"):
            return False
        raise LiteralError(f"expected true or false for {_s(shape)} but found '{tok}'")
    if t.is_integer:
        if not _INT.match(tok):
            raise LiteralError(f"expected an integer for {_s(shape)} but found '{tok}'")
        v = int(tok)
        info = ml_dtypes.iinfo(t.numpy)
        lo, hi = int(info.min), int(info.max)
        if t.bits == 64:
            # Like XLA, 64-bit literals wrap: u64 constant(-1) is 2^64-1, s64 takes up to 2^64-1.
            lo, hi = -(1 << 63), (1 << 64) - 1
            if not lo <= v <= hi:
                raise LiteralError(f"value {tok} is out of range for {t.name}")
            if t.kind == "sint":
                return v - (1 << 64) if v > info.max else v
            return v % (1 << 64)
        if not lo <= v <= hi:
            raise LiteralError(f"value {tok} is out of range for {t.name}")
        return v
    if _FLOAT.fullmatch(tok):
        return float(tok)
    raise LiteralError(f"expected a number for {_s(shape)} but found '{tok}'")


def _to_numpy(flat: list, shape: ArrayShape) -> np.ndarray:
    dtype = shape.dtype.numpy
    if shape.dtype.is_complex:
        values = [complex(_number(r, _REAL_OF[shape.dtype.name]), _number(i, _REAL_OF[shape.dtype.name]))
                  for r, i in flat]
        with np.errstate(over="ignore", invalid="ignore"):
            arr = np.array(values, dtype=dtype)
        parts = [t for pair in flat for t in pair]
        _check_float_range(arr.view(arr.real.dtype).reshape(-1), parts, shape)
        return arr.reshape(shape.dims)
    values = None
    payloads: list[tuple[int, str, int]] = []
    if shape.dtype.is_float:
        if _FLOATS.fullmatch(" ".join(flat)):
            values = [float(tok) for tok in flat]  # bulk path; _number explains any failure
        elif "(" in "".join(flat):
            flat = list(flat)
            for i, tok in enumerate(flat):
                m = _NAN_PAYLOAD.match(tok)
                if m is not None:
                    payloads.append((i, m.group(1), int(m.group(2), 16)))
                    flat[i] = m.group(1) + "nan"
    if values is None:
        values = [_number(tok, shape) for tok in flat]
    if shape.dtype.is_float:
        with np.errstate(over="ignore", invalid="ignore"):
            wide = np.array(values, dtype=np.float64)
            arr = wide.astype(dtype)
        _check_float_range(arr, flat, shape)
        for i, sign, payload in payloads:
            _set_nan_payload(arr, i, sign == "-", payload, shape)
    else:
        arr = np.array(values, dtype=dtype)
    return arr.reshape(shape.dims)


def _check_float_range(arr: np.ndarray, flat: list, shape: ArrayShape) -> None:
    """XLA refuses a finite literal that does not fit its type (it would read as inf or NaN)."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(arr.astype(np.float64))
    if not bad.any():
        return
    for i in np.flatnonzero(bad):
        tok = flat[i]
        if "inf" not in tok and "nan" not in tok:
            raise LiteralError(f"value {tok} is out of range for {shape.dtype.name}")


# Float types whose NaNs carry a payload (an all-ones exponent with any nonzero mantissa).
_IEEE_NAN_TYPES = frozenset({"f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e3m4"})
_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _set_nan_payload(arr: np.ndarray, i: int, negative: bool, payload: int, shape: ArrayShape) -> None:
    name = shape.dtype.name
    info = ml_dtypes.finfo(arr.dtype)
    if name not in _IEEE_NAN_TYPES or not 0 < payload < (1 << info.nmant):
        raise LiteralError(f"{name} literal tries to set NaN payload 0x{payload:x}")
    bits = arr.dtype.itemsize * 8
    word = ((1 << info.nexp) - 1) << info.nmant | payload | (int(negative) << (bits - 1))
    arr.reshape(-1).view(_UINT_OF_SIZE[arr.dtype.itemsize])[i] = word


def _nan_text(v, type_name: str) -> str:
    """`nan`, `-nan`, or with a payload that is not the quiet NaN's: `nan(0x1)`."""
    a = np.asarray(v)
    with np.errstate(invalid="ignore"):
        sign = "-" if np.signbit(a.astype(np.float64)) else ""
    if type_name not in _IEEE_NAN_TYPES:
        return sign + "nan"
    info = ml_dtypes.finfo(a.dtype)
    payload = int(a.reshape(1).view(_UINT_OF_SIZE[a.dtype.itemsize])[0]) & ((1 << info.nmant) - 1)
    if payload == 1 << (info.nmant - 1):
        return sign + "nan"
    return f"{sign}nan(0x{payload:x})"


def _real_shape(name: str) -> ArrayShape:
    from .shapes import scalar

    return scalar(name)


_REAL_OF = {"c64": _real_shape("f32"), "c128": _real_shape("f64")}


# ---- printing -----------------------------------------------------------------------------
# XLA prints a float with `%.<digits10>g` when that reads back to the same value and with
# `%.<max_digits10>g` otherwise; for the narrow types it always uses max_digits10.
_FLOAT_DIGITS = {"f32": (6, 9), "f64": (15, 17), "c64": (6, 9), "c128": (15, 17),
                 "f16": (None, 5), "bf16": (None, 4), "f8e4m3fn": (None, 3), "f8e5m2": (None, 2)}


def _max_digits10(dtype) -> int:
    """Decimal digits that identify every value of a float type: ceil(1 + p * log10(2))."""
    return math.ceil(1 + (ml_dtypes.finfo(dtype).nmant + 1) * math.log10(2))


def _format_float(v, type_name: str) -> str:
    f = float(v)
    if math.isnan(f):
        return _nan_text(v, type_name)
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if f == 0.0 and math.copysign(1.0, f) < 0:
        return "-0.0"  # XLA's parser reads "-0" as the integer 0 and would lose the sign
    digits = _FLOAT_DIGITS.get(type_name)
    if digits is None:
        digits = _FLOAT_DIGITS[type_name] = (None, _max_digits10(np.asarray(v).dtype))
    short, full = digits
    if short is not None:
        text = "%.*g" % (short, f)
        back = float(text)
        if (np.float32(back) == np.float32(f)) if full == 9 else (back == f):
            return text
    return "%.*g" % (full, f)


def format_element(v, shape: ArrayShape, in_array: bool = False) -> str:
    """One element as XLA prints it (pred prints true/false as a scalar, 1/0 in arrays)."""
    t = shape.dtype
    if t.is_pred:
        v = bool(v)
        if in_array:
            return "1" if v else "0"
        return "true" if v else "false"
    if t.is_integer:
        return str(int(v))
    if t.is_complex:
        return f"({_format_float(v.real, t.name)}, {_format_float(v.imag, t.name)})"
    return _format_float(v, t.name)


def format_literal(value, shape: Shape) -> str:
    """The literal text of `value` (what goes between `constant(` and `)`)."""
    if value is None:
        return "{...}"
    if isinstance(shape, TupleShape):
        return "(" + ", ".join(format_literal(v, s) for v, s in zip(value, shape.elements)) + ")"
    arr = np.asarray(value)
    if arr.size != shape.element_count():
        raise ValueError(f"a literal of {arr.size} elements cannot be printed as {_s(shape)}")
    if shape.rank == 0:
        return format_element(arr.reshape(()).item() if not shape.dtype.is_float else arr.reshape(())[()], shape)
    elems = [format_element(x, shape, True) for x in (arr.reshape(-1).tolist() if not shape.dtype.is_float
                                                         else arr.reshape(-1))]
    return _nest(elems, shape.dims, 0, shape.rank, [])


def _nest(elems: list[str], dims: tuple[int, ...], d: int, rank: int, index: list[int]) -> str:
    if rank == 1:
        return "{" + ", ".join(elems) + "}"
    if d == rank - 1:
        if len(elems) <= 1:
            return "{" + "".join(elems) + "}"
        return "{ " + ", ".join(elems) + " }"
    n = dims[d]
    step = len(elems) // n if n else 0
    parts = []
    for k in range(n):
        sub = _nest(elems[k * step:(k + 1) * step], dims, d + 1, rank, index + [k])
        parts.append(sub)
    comment = f"/*i{d - 1}={index[-1]}*/ " if rank > 3 and 0 < d <= rank - 2 else ""
    if not parts:
        return "{ " + comment + "}" if comment else "{}"
    return "{ " + comment + ", ".join(parts) + " }"


def constant_int(inst) -> int | None:
    """The value of a one-element array `constant` as an int (a dynamic slice's constant start
    index); None for any other instruction and for an elided literal (`{...}`: unknown)."""
    if inst.opcode != "constant" or inst.literal is None or not inst.shape.is_array:
        return None
    if inst.shape.element_count() != 1:
        return None
    return int(np.asarray(inst.literal).reshape(-1)[0])
