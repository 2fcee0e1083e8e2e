"""Structured attribute values of HLO instructions (windows, convolution dimension numbers)
and `Raw` for attributes kept verbatim."""
from __future__ import annotations

from dataclasses import dataclass

# Attributes whose value is a called computation (a list of them for branch_computations and
# custom-call's called_computations).
COMPUTATION_ATTRS = (
    "to_apply",
    "calls",
    "condition",
    "body",
    "select",
    "scatter",
    "true_computation",
    "false_computation",
    "branch_computations",
    "called_computations",  # custom-call
)


@dataclass(frozen=True)
class Raw:
    """An attribute value kept as its exact HLO text (metadata, backend_config, sharding ...)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class WindowDimension:
    """One dimension of a `window={...}` attribute."""

    size: int = 1
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    window_dilation: int = 1
    base_dilation: int = 1
    window_reversal: bool = False


@dataclass(frozen=True)
class Window:
    """XLA's Window: `window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}`."""

    dimensions: tuple[WindowDimension, ...]

    def to_text(self) -> str:
        """Text as XLA prints it: only fields that differ from their defaults."""
        dims = self.dimensions
        if not dims:
            return "{}"
        parts = ["size=" + "x".join(str(d.size) for d in dims)]
        if any(d.stride != 1 for d in dims):
            parts.append("stride=" + "x".join(str(d.stride) for d in dims))
        if any(d.padding_low or d.padding_high for d in dims):
            parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in dims))
        if any(d.base_dilation != 1 for d in dims):
            parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in dims))
        if any(d.window_dilation != 1 for d in dims):
            parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in dims))
        if any(d.window_reversal for d in dims):
            parts.append("rhs_reversal=" + "x".join("1" if d.window_reversal else "0" for d in dims))
        return "{" + " ".join(parts) + "}"


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """Convolution dimension numbers from `dim_labels=b01f_01io->b01f`.

    Spatial dimensions are listed in the order of their digits (0, 1, ...).
    """

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]

    @staticmethod
    def of(value) -> "ConvDimensionNumbers":
        """`value` itself when it is ConvDimensionNumbers, else parsed from its text (a
        dim_labels attribute may be kept as text); ValueError if malformed."""
        return value if isinstance(value, ConvDimensionNumbers) else ConvDimensionNumbers.from_labels(str(value))

    @staticmethod
    def from_labels(text: str) -> "ConvDimensionNumbers":
        """Parse `b01f_01io->b01f`; ValueError with the reason if malformed."""
        try:
            lhs_rhs, out = text.split("->")
            lhs, rhs = lhs_rhs.split("_")
        except ValueError:
            raise ValueError(f"dim_labels '{text}' is not of the form lhs_rhs->out") from None
        n = len(lhs) - 2
        if n < 0 or len(rhs) != n + 2 or len(out) != n + 2:
            raise ValueError(f"dim_labels '{text}' has inconsistent ranks")

        def spatial(s: str) -> tuple[int, ...]:
            pos = {}
            for i, ch in enumerate(s):
                if ch.isdigit():
                    pos[int(ch)] = i
            if sorted(pos) != list(range(n)):
                raise ValueError(f"dim_labels '{text}' must number spatial dimensions 0..{n - 1}")
            return tuple(pos[k] for k in range(n))

        def find(s: str, ch: str) -> int:
            if s.count(ch) != 1:
                raise ValueError(f"dim_labels '{text}': '{s}' must contain '{ch}' exactly once")
            return s.index(ch)

        return ConvDimensionNumbers(
            find(lhs, "b"), find(lhs, "f"), spatial(lhs),
            find(rhs, "i"), find(rhs, "o"), spatial(rhs),
            find(out, "b"), find(out, "f"), spatial(out),
        )

    def to_labels(self) -> str:
        """The `dim_labels` text of these numbers."""

        def render(rank: int, named: dict[int, str], spatial: tuple[int, ...]) -> str:
            chars = ["?"] * rank
            for pos, ch in named.items():
                chars[pos] = ch
            for k, pos in enumerate(spatial):
                chars[pos] = str(k)
            return "".join(chars)

        n = len(self.input_spatial) + 2
        lhs = render(n, {self.input_batch: "b", self.input_feature: "f"}, self.input_spatial)
        rhs = render(n, {self.kernel_input_feature: "i", self.kernel_output_feature: "o"}, self.kernel_spatial)
        out = render(n, {self.output_batch: "b", self.output_feature: "f"}, self.output_spatial)
        return f"{lhs}_{rhs}->{out}"
