"""The parameter space of a compact policy: what the LLM may propose, and how a proposal is made legal (clipped to
``[low, high]`` and rounded to ``decimals``, or checked against a set of allowed values)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

ReplyStyle = Literal["indexed", "list"]
"""How a vector is written: ``"indexed"`` (``params[0]: v0, params[1]: v1, ...``) or ``"list"`` (``params: [v0, v1, ...]``)."""

REPLY_STYLES: tuple[str, ...] = ("indexed", "list")


@dataclass(frozen=True)
class Projection:
    """
    A proposal made legal by :meth:`ParameterSpace.project`.

    :param params: The projected parameter vector (float64).
    :param notes: One line per value that was clipped or rounded, for the logs.
    """

    params: np.ndarray
    notes: tuple[str, ...] = field(default_factory=tuple)


class InvalidParameters(ValueError):
    """A proposal that cannot be made legal (wrong count, not finite, not in the action set)."""


@dataclass(frozen=True)
class ParameterSpace:
    """
    The flat parameter vector of a policy as the LLM sees it: a range and a precision, or a set of allowed values.

    :param size: Number of parameters.
    :param low: Lower bound of every parameter (continuous spaces).
    :param high: Upper bound of every parameter (continuous spaces).
    :param decimals: Number of decimals kept after rounding (continuous spaces).
    :param values: The allowed values (discrete spaces), e.g. ``(0, 1, 2, 3)`` for four actions.
    :param init_std: Standard deviation of a random candidate's values (:meth:`sample`; continuous spaces).
    """

    size: int
    low: float = -6.0
    high: float = 6.0
    decimals: int = 1
    values: tuple[int, ...] | None = None
    init_std: float = 3.0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"A parameter space needs at least one parameter, got size={self.size}")
        if self.values is not None:
            if len(self.values) == 0:
                raise ValueError("A discrete parameter space needs at least one allowed value")
            return
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            raise ValueError(f"Parameter bounds must be finite, got ({self.low}, {self.high})")
        if not self.low < self.high:
            raise ValueError(f"Parameter bounds are empty or reversed: low={self.low} must be < high={self.high}")
        if self.decimals < 0:
            raise ValueError(f"decimals must be >= 0, got {self.decimals}")
        if not (np.isfinite(self.init_std) and self.init_std > 0):
            raise ValueError(f"init_std must be a finite number > 0, got {self.init_std}")
        grid_low, grid_high = self.grid_bounds()
        if grid_low > grid_high:
            raise ValueError(
                f"No value with {self.decimals} decimal(s) lies in [{self.low}, {self.high}]; "
                "widen the bounds or raise decimals"
            )

    def grid_bounds(self) -> tuple[float, float]:
        """The smallest and the largest value with ``decimals`` decimals inside ``[low, high]`` (``low > high``: none)."""
        step = 10.0**-self.decimals
        grid_low = round(self.low, self.decimals)
        if grid_low < self.low:
            grid_low = round(grid_low + step, self.decimals)
        grid_high = round(self.high, self.decimals)
        if grid_high > self.high:
            grid_high = round(grid_high - step, self.decimals)
        return float(grid_low), float(grid_high)

    @property
    def is_discrete(self) -> bool:
        """Whether the parameters are chosen from a finite set of values (tabular policies)."""
        return self.values is not None

    def project(self, values: np.ndarray | list[float]) -> Projection:
        """Make a proposal legal: check the count and finiteness, then clip and round (a value rounded out of the bounds
        moves to :meth:`grid_bounds`), or check membership in the value set (else :class:`InvalidParameters`)."""
        vec = np.asarray(values, dtype=np.float64).reshape(-1)
        if vec.size != self.size:
            raise InvalidParameters(f"expected exactly {self.size} values, got {vec.size}")
        bad = np.flatnonzero(~np.isfinite(vec))
        if bad.size:
            raise InvalidParameters(f"params[{bad[0]}] is not a finite number ({vec[bad[0]]})")
        if self.values is not None:
            allowed = np.asarray(self.values, dtype=np.float64)
            outside = [i for i, v in enumerate(vec) if not np.any(v == allowed)]
            if outside:
                raise InvalidParameters(
                    f"params[{outside[0]}] = {vec[outside[0]]:.6g} is not one of the allowed values {list(self.values)}"
                )
            return Projection(vec.copy())
        clipped = np.clip(vec, self.low, self.high)
        rounded = np.round(clipped, self.decimals)
        grid_low, grid_high = self.grid_bounds()
        rounded[rounded < self.low] = grid_low  # a bound that is not a multiple of the precision
        rounded[rounded > self.high] = grid_high
        notes = []
        for i in np.flatnonzero(rounded != vec):
            how = "clipped and rounded" if clipped[i] != vec[i] else "rounded"
            notes.append(f"params[{i}]: {float(vec[i])!r} {how} to {rounded[i]:.6g}")
        # -0.0 is shown as 0.0 and compares equal to it; normalise so saved vectors read well
        rounded[rounded == 0.0] = 0.0
        return Projection(rounded, tuple(notes))

    def sample(self, rng: np.random.Generator, std: float | None = None) -> np.ndarray:
        """A random candidate: N(0, std) per parameter (``None``: :attr:`init_std`), legal; or uniform over the values."""
        if self.values is not None:
            return rng.choice(np.asarray(self.values, dtype=np.float64), size=self.size)
        return self.project(rng.normal(0.0, self.init_std if std is None else std, size=self.size)).params

    def perturb(self, center: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
        """A random neighbour of ``center``: Gaussian noise of scale ``scale``, or one value changed to another allowed one."""
        if self.values is not None:
            out = np.array(center, dtype=np.float64, copy=True)
            i = int(rng.integers(self.size))
            others = [v for v in self.values if v != out[i]] or list(self.values)
            out[i] = float(rng.choice(others))
            return out
        return self.project(np.asarray(center, dtype=np.float64) + rng.normal(0.0, scale, size=self.size)).params

    def format(self, params: np.ndarray, style: ReplyStyle = "indexed") -> str:
        """``params`` in a reply format (:data:`ReplyStyle`) the parser reads back exactly."""
        if style not in REPLY_STYLES:
            raise ValueError(f"style must be one of {REPLY_STYLES}, got {style!r}")
        values = [self.format_value(v) for v in params]
        if style == "list":
            return "params: [" + ", ".join(values) + "]"
        return ", ".join(f"params[{i}]: {v}" for i, v in enumerate(values))

    def format_value(self, value: float) -> str:
        """Format one value at the space's precision."""
        if self.values is not None:
            return str(int(value))
        return f"{value:.{self.decimals}f}"
