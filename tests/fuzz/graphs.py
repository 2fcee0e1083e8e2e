"""Random valid HLO graphs: small DAGs of elementwise ops (unary, binary, compare, select, clamp,
convert over f32, f16, bf16, s32, u8, pred), broadcast, reshape, transpose, slice, reduce
(row, column, full; add/max/min), concatenate, pad, reverse, iota, constants and dynamic-slice.

Valid by construction: every op is built from operands whose shapes it accepts; the result
shape is computed here, and the verifier checks it (a rejection is a generator or verifier bug).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

DTYPES = ["f32", "f16", "bf16", "s32", "u8", "pred"]
FLOATS = ("f32", "f16", "bf16")
FLOAT_UNARY = ["abs", "negate", "sign", "ceil", "floor", "round-nearest-afz", "round-nearest-even",
               "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sqrt", "rsqrt",
               "cbrt", "tanh", "sine", "cosine", "copy"]
INT_UNARY = ["abs", "negate", "sign", "not", "popcnt", "count-leading-zeros", "copy"]
FLOAT_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "atan2", "remainder"]
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
              "shift-left", "shift-right-arithmetic", "shift-right-logical", "power"]
PRED_BINARY = ["and", "or", "xor", "add", "multiply", "maximum", "minimum"]
DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]
SCALAR_LITERALS = {"f32": ["0", "1", "-2.5", "inf", "-inf", "nan", "1e-40", "3.4028235e+38", "-0"],
                   "f16": ["0", "1", "-2.5", "inf", "65504", "6e-08", "-0"],
                   "bf16": ["0", "1", "-2.5", "inf", "-inf", "1e-40"],
                   "s32": ["0", "1", "-1", "7", "2147483647", "-2147483648"],
                   "u8": ["0", "1", "7", "255"], "pred": ["true", "false"]}


# Sizes and the element budget of large graphs' arrays (`GraphBuilder._large_dims`).
LARGE_SIZES = [1, 2, 3, 8, 16, 31, 33, 64, 96, 100, 257, 1024, 4099]
LARGE_ELEMENTS = 1 << 18


@dataclass
class Value:
    """An instruction of the graph: its name, element type and dimensions."""

    name: str
    dtype: str
    dims: tuple[int, ...]

    @property
    def shape(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


class GraphBuilder:
    """Builds one random entry computation (plus the reducer computations it calls)."""

    def __init__(self, rng: random.Random, large: bool = False) -> None:
        self.rng = rng
        self.large = large
        self.lines: list[str] = []
        self.values: list[Value] = []
        self.params: list[Value] = []
        self.reducers: dict[tuple[str, str], str] = {}
        self.used: set[str] = set()

    # ---- helpers ------------------------------------------------------------------------
    def emit(self, dtype: str, dims: tuple[int, ...], text: str, operands: list[Value] = ()) -> Value:
        v = Value(f"v{len(self.values)}", dtype, tuple(dims))
        self.lines.append(f"  {v.name} = {v.shape} {text}")
        self.values.append(v)
        self.used.update(o.name for o in operands)
        return v

    def random_dims(self) -> tuple[int, ...]:
        if self.large:
            return self._large_dims()
        rank = self.rng.choice([0, 1, 1, 2, 2, 2, 3])
        return tuple(self.rng.choice([1, 2, 3, 4, 5, 8]) if self.rng.random() > 0.03 else 0 for _ in range(rank))

    def _large_dims(self) -> tuple[int, ...]:
        """Dimensions of a large graph (`random_graph(large=True)`): sizes that take the kernels'
        paths for many rows (tiles, splits, windows of 32 rows, blocks of columns), at most
        LARGE_ELEMENTS elements."""
        rank = self.rng.choice([1, 2, 2, 3, 3, 4])
        dims = [self.rng.choice(LARGE_SIZES) for _ in range(rank)]
        while math.prod(dims) > LARGE_ELEMENTS:
            k = dims.index(max(dims))
            dims[k] = max(1, dims[k] // self.rng.choice([2, 3, 8]))
        return tuple(dims)

    def parameter(self, dtype: str, dims: tuple[int, ...]) -> Value:
        v = self.emit(dtype, dims, f"parameter({len(self.params)})")
        self.params.append(v)
        return v

    def scalar_constant(self, dtype: str) -> Value:
        return self.emit(dtype, (), f"constant({self.rng.choice(SCALAR_LITERALS[dtype])})")

    def pick(self, pred=lambda v: True) -> Value | None:
        cands = [v for v in self.values if pred(v)]
        if not cands:
            return None
        # Prefer recent values so graphs grow deep, not only wide.
        return cands[-1 - min(int(self.rng.expovariate(0.5)), len(cands) - 1)]

    def like(self, dtype: str, dims: tuple[int, ...]) -> Value:
        """A value of this type and shape: an existing one, a broadcast constant, a new parameter
        or a converted value."""
        same = [v for v in self.values if v.dtype == dtype and v.dims == dims]
        r = self.rng.random()
        if same and r < 0.6:
            return self.rng.choice(same)
        # A large graph's ops can grow an array past the inputs' budget: no parameter of it.
        if r < 0.75 or (self.large and math.prod(dims) > LARGE_ELEMENTS):
            c = self.scalar_constant(dtype)
            return c if not dims else self.emit(dtype, dims, f"broadcast({c.name}), dimensions={{}}", [c])
        other = [v for v in self.values if v.dims == dims and v.dtype != dtype]
        if other and r < 0.85:
            o = self.rng.choice(other)
            return self.emit(dtype, dims, f"convert({o.name})", [o])
        return self.parameter(dtype, dims)

    def reducer(self, dtype: str, kind: str) -> str:
        key = (dtype, kind)
        if key not in self.reducers:
            self.reducers[key] = f"red_{kind}_{dtype}"
        return self.reducers[key]

    # ---- ops ----------------------------------------------------------------------------
    def op_unary(self) -> Value | None:
        x = self.pick(lambda v: True)
        if x is None:
            return None
        if x.dtype in FLOATS:
            opcode = self.rng.choice(FLOAT_UNARY + ["is-finite"])
            out = "pred" if opcode == "is-finite" else x.dtype
        elif x.dtype == "pred":
            opcode, out = "not", "pred"
        else:
            opcode = self.rng.choice(INT_UNARY)
            if x.dtype[0] == "u" and opcode in ("abs", "sign", "negate"):
                opcode = "not"
            out = x.dtype
        return self.emit(out, x.dims, f"{opcode}({x.name})", [x])

    def op_binary(self) -> Value | None:
        x = self.pick()
        if x is None:
            return None
        y = self.like(x.dtype, x.dims)
        ops = FLOAT_BINARY if x.dtype in FLOATS else (PRED_BINARY if x.dtype == "pred" else INT_BINARY)
        a, b = (x, y) if self.rng.random() < 0.5 else (y, x)
        return self.emit(x.dtype, x.dims, f"{self.rng.choice(ops)}({a.name}, {b.name})", [a, b])

    def op_compare(self) -> Value | None:
        x = self.pick()
        if x is None:
            return None
        y = self.like(x.dtype, x.dims)
        extra = ""
        if x.dtype in FLOATS and self.rng.random() < 0.3:
            extra = ", type=TOTALORDER"
        return self.emit("pred", x.dims, f"compare({x.name}, {y.name}), direction={self.rng.choice(DIRECTIONS)}{extra}",
                         [x, y])

    def op_select(self) -> Value | None:
        x = self.pick()
        if x is None:
            return None
        p = self.like("pred", x.dims)
        y = self.like(x.dtype, x.dims)
        return self.emit(x.dtype, x.dims, f"select({p.name}, {x.name}, {y.name})", [p, x, y])

    def op_clamp(self) -> Value | None:
        x = self.pick(lambda v: v.dtype != "pred")
        if x is None:
            return None
        lo = self.like(x.dtype, x.dims if self.rng.random() < 0.5 else ())
        hi = self.like(x.dtype, lo.dims)
        return self.emit(x.dtype, x.dims, f"clamp({lo.name}, {x.name}, {hi.name})", [lo, x, hi])

    def op_convert(self) -> Value | None:
        x = self.pick()
        if x is None:
            return None
        return self.emit(self.rng.choice([d for d in DTYPES if d != x.dtype]), x.dims, f"convert({x.name})", [x])

    def op_broadcast(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) < 3)
        if x is None:
            return None
        rank = len(x.dims) + self.rng.randint(1, 3 - len(x.dims))
        kept = sorted(self.rng.sample(range(rank), len(x.dims)))
        dims = [self.rng.choice([1, 2, 3, 4]) for _ in range(rank)]
        for k, d in zip(kept, x.dims):
            dims[k] = d
        return self.emit(x.dtype, tuple(dims), f"broadcast({x.name}), dimensions={{{','.join(map(str, kept))}}}", [x])

    def op_reshape(self) -> Value | None:
        x = self.pick()
        if x is None:
            return None
        n = 1
        for d in x.dims:
            n *= d
        if n == 0:
            dims = tuple(self.rng.choice([0, 2]) for _ in range(self.rng.randint(1, 3)))
            dims = dims if 0 in dims else dims + (0,)
        else:
            dims, rest = [], n
            for f in self.rng.sample([2, 3, 4, 5], 4):
                if rest % f == 0 and self.rng.random() < 0.5:
                    dims.append(f)
                    rest //= f
            dims.append(rest)
            self.rng.shuffle(dims)
            if self.rng.random() < 0.3:
                dims.insert(self.rng.randrange(len(dims) + 1), 1)
            if n == 1 and self.rng.random() < 0.5:
                dims = []
        return self.emit(x.dtype, tuple(dims), f"reshape({x.name})", [x])

    def op_transpose(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) >= 2)
        if x is None:
            return None
        perm = list(range(len(x.dims)))
        self.rng.shuffle(perm)
        return self.emit(x.dtype, tuple(x.dims[p] for p in perm),
                         f"transpose({x.name}), dimensions={{{','.join(map(str, perm))}}}", [x])

    def op_slice(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) >= 1)
        if x is None:
            return None
        parts, dims = [], []
        for d in x.dims:
            start = self.rng.randint(0, d)
            limit = self.rng.randint(start, d)
            stride = self.rng.choice([1, 1, 2, 3])
            parts.append(f"[{start}:{limit}" + (f":{stride}]" if stride != 1 else "]"))
            dims.append((limit - start + stride - 1) // stride)
        return self.emit(x.dtype, tuple(dims), f"slice({x.name}), slice={{{', '.join(parts)}}}", [x])

    def op_reduce(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) >= 1)
        if x is None:
            return None
        rank = len(x.dims)
        mode = self.rng.choice(["row", "col", "full", "any"])
        if mode == "row":
            red = [rank - 1]
        elif mode == "col":
            red = [0]
        elif mode == "full":
            red = list(range(rank))
        else:
            red = sorted(self.rng.sample(range(rank), self.rng.randint(1, rank)))
        kind = self.rng.choice(["and", "or"]) if x.dtype == "pred" else self.rng.choice(["add", "maximum", "minimum"])
        init = {"add": "0", "and": "true", "or": "false"}.get(kind)
        if init is None:
            lo = {"f32": "-inf", "f16": "-inf", "bf16": "-inf", "s32": "-2147483648", "u8": "0"}
            hi = {"f32": "inf", "f16": "inf", "bf16": "inf", "s32": "2147483647", "u8": "255"}
            init = (lo if kind == "maximum" else hi)[x.dtype]
        # Only the combiner's identity: with any other init value the result depends on how many
        # times an implementation applies it (XLA leaves that open), so backends may differ.
        c = self.emit(x.dtype, (), f"constant({init})")
        dims = tuple(d for k, d in enumerate(x.dims) if k not in red)
        return self.emit(x.dtype, dims, f"reduce({x.name}, {c.name}), dimensions={{{','.join(map(str, red))}}}, "
                         f"to_apply={self.reducer(x.dtype, kind)}", [x, c])

    def op_concatenate(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) >= 1)
        if x is None:
            return None
        axis = self.rng.randrange(len(x.dims))
        parts = [x]
        for _ in range(self.rng.randint(1, 2)):
            dims = list(x.dims)
            dims[axis] = self.rng.choice([1, 2, 3, x.dims[axis]])
            parts.append(self.like(x.dtype, tuple(dims)))
        self.rng.shuffle(parts)
        dims = list(x.dims)
        dims[axis] = sum(p.dims[axis] for p in parts)
        return self.emit(x.dtype, tuple(dims), f"concatenate({', '.join(p.name for p in parts)}), dimensions={{{axis}}}",
                         parts)

    def op_pad(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) >= 1)
        if x is None:
            return None
        c = self.scalar_constant(x.dtype)
        cfg, dims = [], []
        for d in x.dims:
            interior = self.rng.choice([0, 0, 1, 2])
            base = d + max(d - 1, 0) * interior
            lo = self.rng.randint(-min(base, 2), 2)
            hi = self.rng.randint(-min(base + lo, 2), 2) if base + lo > 0 else self.rng.randint(0, 2)
            cfg.append(f"{lo}_{hi}" + (f"_{interior}" if interior else ""))
            dims.append(base + lo + hi)
        return self.emit(x.dtype, tuple(dims), f"pad({x.name}, {c.name}), padding={'x'.join(cfg)}", [x, c])

    def op_reverse(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) >= 1)
        if x is None:
            return None
        dims = sorted(self.rng.sample(range(len(x.dims)), self.rng.randint(1, len(x.dims))))
        return self.emit(x.dtype, x.dims, f"reverse({x.name}), dimensions={{{','.join(map(str, dims))}}}", [x])

    def op_iota(self) -> Value | None:
        dims = self.random_dims() or (4,)
        dtype = self.rng.choice(["s32", "f32", "u8", "f16"])
        return self.emit(dtype, dims, f"iota(), iota_dimension={self.rng.randrange(len(dims))}")

    def op_dynamic_slice(self) -> Value | None:
        x = self.pick(lambda v: len(v.dims) >= 1)
        if x is None:
            return None
        idx = []
        for _ in x.dims:
            if self.rng.random() < 0.5:
                idx.append(self.emit("s32", (), f"constant({self.rng.choice([0, 1, 2, -1, 7, 2147483647])})"))
            else:
                idx.append(self.parameter("s32", ()))
        sizes = [self.rng.randint(0, d) for d in x.dims]
        names = ", ".join(v.name for v in [x] + idx)
        return self.emit(x.dtype, tuple(sizes),
                         f"dynamic-slice({names}), dynamic_slice_sizes={{{','.join(map(str, sizes))}}}", [x] + idx)

    OPS = {"unary": 3, "binary": 4, "compare": 1, "select": 1, "clamp": 1, "convert": 1, "broadcast": 2,
           "reshape": 2, "transpose": 1, "slice": 1, "reduce": 2, "concatenate": 1, "pad": 1, "reverse": 1,
           "iota": 0.5, "dynamic_slice": 1}

    def build(self, n_ops: int) -> str:
        """The module text of a random graph with about `n_ops` operations."""
        for _ in range(self.rng.randint(1, 3)):
            self.parameter(self.rng.choice(DTYPES), self.random_dims())
        names, weights = zip(*self.OPS.items())
        for _ in range(n_ops):
            getattr(self, "op_" + self.rng.choices(names, weights)[0])()
        unused = [v for v in self.values if v.name not in self.used and v not in self.params]
        outs = unused[-self.rng.randint(1, 3):] if unused else [self.values[-1]]
        if len(outs) == 1 and self.rng.random() < 0.7:
            self.lines.append(f"  ROOT out = {outs[0].shape} copy({outs[0].name})")
        else:
            shapes = ", ".join(v.shape for v in outs)
            self.lines.append(f"  ROOT out = ({shapes}) tuple({', '.join(v.name for v in outs)})")
        return self.text()

    def text(self) -> str:
        parts = ["HloModule fuzz_graph\n"]
        for (dtype, kind), name in sorted(self.reducers.items()):
            parts.append(f"{name} {{\n  a = {dtype}[] parameter(0)\n  b = {dtype}[] parameter(1)\n"
                         f"  ROOT r = {dtype}[] {kind}(a, b)\n}}\n")
        parts.append("ENTRY main {\n" + "\n".join(self.lines) + "\n}\n")
        return "\n".join(parts)


def random_graph(seed: int, n_ops: int | None = None, large: bool = False) -> str:
    """The module text of the random graph for `seed` (deterministic); `large`: arrays of up to
    LARGE_ELEMENTS elements, so that reductions and loops take their many-row paths."""
    rng = random.Random(seed)
    return GraphBuilder(rng, large).build(n_ops if n_ops is not None else rng.randint(3, 14))
