"""A hypothesis strategy for random fusible HLO graphs (elementwise, broadcast, reshape, transpose,
slice, concatenate and reduce over small f32 shapes), shared by the fusion and backend
differential tests."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

_UNARY = ("negate", "abs", "exponential", "tanh", "floor", "sine", "log", "sqrt", "logistic")
_BINARY = ("add", "multiply", "subtract", "maximum", "divide", "minimum")
_HEADER = """HloModule random

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

"""


def _shape(dims) -> str:
    return f"f32[{','.join(str(d) for d in dims)}]"


@st.composite
def random_module(draw, max_a: int = 3, max_b: int = 4) -> str:
    """A random DAG of elementwise, broadcast, reshape, transpose, slice, concatenate and reduce
    instructions over small shapes (dimensions up to `max_a` x `max_b`), with producers shared
    by several users."""
    a = draw(st.integers(1, max_a))
    b = draw(st.integers(2, max_b))
    nodes: list[tuple[str, tuple[int, ...]]] = []
    lines: list[str] = []
    nparams = draw(st.integers(1, 3))
    for i in range(nparams):
        dims = (a, b) if i < 2 else (b,)
        nodes.append((f"p{i}", dims))
        lines.append(f"  p{i} = {_shape(dims)} parameter({i})")
    lines.append("  zero = f32[] constant(0)")
    lines.append("  ninf = f32[] constant(-inf)")
    count = draw(st.integers(3, 14))
    for k in range(count):
        name = f"n{k}"
        # favour recent nodes but allow any: shared producers
        pick = lambda: nodes[draw(st.integers(0, len(nodes) - 1))]
        op = draw(st.sampled_from(("unary", "binary", "binary", "broadcast", "reduce", "reshape",
                                   "transpose", "slice", "concat")))
        src, dims = pick()
        if op == "unary":
            u = draw(st.sampled_from(_UNARY))
            lines.append(f"  {name} = {_shape(dims)} {u}({src})")
            nodes.append((name, dims))
        elif op == "binary":
            same = [n for n in nodes if n[1] == dims]
            other = same[draw(st.integers(0, len(same) - 1))][0]
            bop = draw(st.sampled_from(_BINARY))
            lines.append(f"  {name} = {_shape(dims)} {bop}({src}, {other})")
            nodes.append((name, dims))
        elif op == "broadcast" and len(dims) == 1:
            out = (a, dims[0]) if draw(st.booleans()) else (dims[0], a)
            dim = 1 if out[1] == dims[0] and out != (dims[0], a) else 0
            lines.append(f"  {name} = {_shape(out)} broadcast({src}), dimensions={{{dim}}}")
            nodes.append((name, out))
        elif op == "reduce" and len(dims) == 2:
            d = draw(st.integers(0, 1))
            reducer, init = draw(st.sampled_from((("add_f32", "zero"), ("max_f32", "ninf"))))
            out = (dims[1 - d],)
            lines.append(f"  {name} = {_shape(out)} reduce({src}, {init}), dimensions={{{d}}}, to_apply={reducer}")
            nodes.append((name, out))
        elif op == "reshape":
            n = int(np.prod(dims))
            out = (n,) if len(dims) == 2 else (1, dims[0])
            lines.append(f"  {name} = {_shape(out)} reshape({src})")
            nodes.append((name, out))
        elif op == "transpose" and len(dims) == 2:
            out = (dims[1], dims[0])
            lines.append(f"  {name} = {_shape(out)} transpose({src}), dimensions={{1,0}}")
            nodes.append((name, out))
        elif op == "slice" and dims[-1] > 1:
            out = dims[:-1] + (dims[-1] - 1,)
            sl = ", ".join([f"[0:{d}]" for d in dims[:-1]] + [f"[1:{dims[-1]}]"])
            lines.append(f"  {name} = {_shape(out)} slice({src}), slice={{{sl}}}")
            nodes.append((name, out))
        elif op == "concat":
            same = [n for n in nodes if n[1] == dims]
            other = same[draw(st.integers(0, len(same) - 1))][0]
            out = dims[:-1] + (2 * dims[-1],)
            lines.append(f"  {name} = {_shape(out)} concatenate({src}, {other}), dimensions={{{len(dims) - 1}}}")
            nodes.append((name, out))
    used = set()
    for line in lines:
        rhs = line.split("=", 1)[1]
        used.update(w for w in rhs.replace("(", " ").replace(")", " ").replace(",", " ").split())
    sinks = [n for n in nodes[nparams:] if n[0] not in used] or [nodes[-1]]
    extra = [n for n in nodes[nparams:] if n not in sinks and draw(st.booleans())]
    outs = sinks + extra
    lines.append(f"  ROOT out = ({', '.join(_shape(d) for _, d in outs)}) tuple({', '.join(n for n, _ in outs)})")
    return _HEADER + "ENTRY main {\n" + "\n".join(lines) + "\n}\n"
