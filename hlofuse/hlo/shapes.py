"""HLO shapes: arrays with layouts and dynamic dimensions, tuples, tokens.

Shapes are small frozen values. Text follows XLA: `f32[2,<=8,?]{2,1,0:T(8,128)S(1)}`,
`(f32[2], s32[])`, `token[]`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from .dtypes import ElementType, TOKEN, element_type

UNBOUNDED = -1  # size of a `?` dimension (XLA's kUnboundedSize)


@dataclass(frozen=True)
class Layout:
    """A dense layout: minor-to-major dimension order plus XLA's optional suffix.

    `suffix` keeps the part after `:` verbatim (tiles `T(8,128)`, memory space `S(1)`,
    element size `E(4)` ...) so that it prints back exactly.
    """

    minor_to_major: tuple[int, ...]
    suffix: str = ""

    def __str__(self) -> str:
        body = ",".join(str(d) for d in self.minor_to_major)
        return "{" + body + (":" + self.suffix if self.suffix else "") + "}"

    @staticmethod
    def default(rank: int) -> "Layout":
        """XLA's default (row-major) layout {rank-1, ..., 0}."""
        return Layout(tuple(range(rank - 1, -1, -1)))


class Shape:
    """Base of the three shape kinds."""

    is_array = False
    is_tuple = False
    is_token = False

    def leaves(self) -> list["ArrayShape"]:
        """The array shapes of this shape, tuples flattened depth-first."""
        raise NotImplementedError

    def byte_size(self) -> int:
        """Bytes held by all array leaves (sub-byte types count a byte per element)."""
        return sum(s.element_count() * s.dtype.byte_size for s in self.leaves())

    def to_text(self, with_layout: bool = True) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.to_text()

    def equal_ignoring_layout(self, other: "Shape") -> bool:
        """Equality of element types and dimensions, layouts ignored."""
        return self.to_text(with_layout=False) == other.to_text(with_layout=False)


@dataclass(frozen=True)
class ArrayShape(Shape):
    """A dense array: element type, dimension sizes, which are dynamic, an optional layout."""

    dtype: ElementType
    dims: tuple[int, ...] = ()
    dynamic: tuple[bool, ...] = field(default=())
    layout: Layout | None = None

    is_array = True

    def __post_init__(self) -> None:
        if not self.dynamic:
            object.__setattr__(self, "dynamic", (False,) * len(self.dims))
        if self.dtype is TOKEN:
            raise ValueError("token is not an array element type")

    @property
    def rank(self) -> int:
        return len(self.dims)

    def element_count(self) -> int:
        # kept on the (frozen, so never stale) shape: the passes' cost rules ask it of the
        # same shapes thousands of times; a dataclass's ==, hash and repr read fields only
        count = self.__dict__.get("_element_count")
        if count is None:
            count = self.__dict__["_element_count"] = math.prod(max(d, 0) for d in self.dims)
        return count

    def byte_size(self) -> int:
        """Bytes of the array (sub-byte types count a byte per element), kept as
        `element_count` is."""
        size = self.__dict__.get("_byte_size")
        if size is None:
            size = self.__dict__["_byte_size"] = self.element_count() * self.dtype.byte_size
        return size

    def leaves(self) -> list["ArrayShape"]:
        return [self]

    def is_row_major(self) -> bool:
        """Whether the layout is the default (major-to-minor) one, or there is none: one
        linear index then walks the elements in their dimensions' row-major order."""
        return self.layout is None or tuple(self.layout.minor_to_major) == tuple(range(self.rank - 1, -1, -1))

    def is_static(self) -> bool:
        return not any(self.dynamic)

    def with_dtype(self, dtype: ElementType) -> "ArrayShape":
        return ArrayShape(dtype, self.dims, self.dynamic, self.layout)

    def with_dims(self, dims, layout: Layout | None = None) -> "ArrayShape":
        """A shape of the same type with new (static) dimensions and the given layout."""
        dims = tuple(int(d) for d in dims)
        return ArrayShape(self.dtype, dims, (False,) * len(dims), layout)

    def with_default_layout(self) -> "ArrayShape":
        return ArrayShape(self.dtype, self.dims, self.dynamic, Layout.default(self.rank))

    def without_layout(self) -> "ArrayShape":
        return ArrayShape(self.dtype, self.dims, self.dynamic, None)

    def to_text(self, with_layout: bool = True) -> str:
        return _array_text(self, with_layout)

    def _text(self, with_layout: bool) -> str:
        parts = []
        for d, dyn in zip(self.dims, self.dynamic):
            if d == UNBOUNDED:
                parts.append("?")
            else:
                parts.append(("<=" if dyn else "") + str(d))
        text = f"{self.dtype.name}[{','.join(parts)}]"
        # XLA writes scalars as `f32[]`, without the empty `{}` layout.
        if with_layout and self.layout is not None and (self.dims or self.layout.suffix):
            text += str(self.layout)
        return text

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, ArrayShape)
            and self.dtype == other.dtype
            and self.dims == other.dims
            and self.dynamic == other.dynamic
            and self.layout == other.layout
        )

    def __hash__(self) -> int:
        return hash((self.dtype.name, self.dims, self.dynamic, self.layout))

    __str__ = Shape.__str__


@functools.lru_cache(maxsize=4096)
def _array_text(shape: ArrayShape, with_layout: bool) -> str:
    """`shape.to_text(with_layout)`, made once per distinct shape (equal array shapes print
    alike: `__eq__` compares everything printed). A module prints the same few shapes
    thousands of times, and the compile cache's key prints the module on every compile."""
    return shape._text(with_layout)


@dataclass(frozen=True)
class TupleShape(Shape):
    """A tuple of shapes (possibly nested, possibly empty)."""

    elements: tuple[Shape, ...] = ()

    is_tuple = True

    def leaves(self) -> list[ArrayShape]:
        out: list[ArrayShape] = []
        for e in self.elements:
            out.extend(e.leaves())
        return out

    def to_text(self, with_layout: bool = True) -> str:
        return "(" + ", ".join(e.to_text(with_layout) for e in self.elements) + ")"

    __str__ = Shape.__str__


@dataclass(frozen=True)
class TokenShape(Shape):
    """The token shape `token[]` that orders side effects."""

    is_token = True

    def leaves(self) -> list[ArrayShape]:
        return []

    def to_text(self, with_layout: bool = True) -> str:
        return "token[]"

    __str__ = Shape.__str__


TOKEN_SHAPE = TokenShape()


def array(dtype: str | ElementType, dims=(), layout: bool = True) -> ArrayShape:
    """Convenience constructor: `array("f32", (2, 3))` with XLA's default layout."""
    t = element_type(dtype) if isinstance(dtype, str) else dtype
    dims = tuple(int(d) for d in dims)
    return ArrayShape(t, dims, (False,) * len(dims), Layout.default(len(dims)) if layout else None)


def scalar(dtype: str | ElementType) -> ArrayShape:
    """A rank-0 array shape."""
    return array(dtype, ())


def flatten_shapes(shape: Shape) -> list[Shape]:
    """Array and token leaves of a shape in depth-first order (token leaves kept)."""
    if isinstance(shape, TupleShape):
        out: list[Shape] = []
        for e in shape.elements:
            out.extend(flatten_shapes(e))
        return out
    return [shape]
