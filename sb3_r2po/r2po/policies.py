"""Compact policies whose flat parameter vector an LLM can read and write.

- :class:`LinearPolicy` (``"MlpLinear"``): ``y = s @ W + b`` for ``Box`` observations; ``Discrete`` actions
  take ``argmax(y)``, ``Box`` actions ``clip(y, low, high)``. Flat layout, state-major:
  ``theta[i * act_dim + j] = W[i, j]``, then the last ``act_dim`` entries are ``b``.
- :class:`TabularPolicy` (``"Tabular"``): ``Discrete`` observations; ``theta[s]`` is the action taken in state ``s``.

Both keep ``theta`` as a float64 torch parameter (so SB3's ``save``/``load``/``set_parameters`` work and a
round trip is exact) and act through a numpy forward that rollouts call with any candidate vector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_r2po.common.parameters import ParameterSpace

MAX_TABULAR_STATES = 1000
"""Largest ``Discrete`` observation space a tabular policy accepts: one value per state must fit in a prompt."""


def _offset(name: str, offset: int) -> str:
    """``name`` plus an integer offset as prompt text: ``j + 5``, ``s - 10``, ``j``."""
    if offset == 0:
        return name
    return f"{name} {'+' if offset > 0 else '-'} {abs(offset)}"


class CompactPolicy(BasePolicy):
    """
    Base class of the policies R2PO optimizes: a flat parameter vector with a known parameter space.

    :param observation_space: The observation space of the environment.
    :param action_space: The action space of the environment.
    :param param_bounds: Range of every parameter (continuous parameter spaces).
    :param param_decimals: Precision of every parameter, in decimals (continuous parameter spaces).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        param_bounds: tuple[float, float] = (-6.0, 6.0),
        param_decimals: int = 1,
    ) -> None:
        super().__init__(observation_space, action_space)
        self.param_bounds = (float(param_bounds[0]), float(param_bounds[1]))
        self.param_decimals = int(param_decimals)
        self.parameter_space = self._make_parameter_space()
        self.theta = th.nn.Parameter(th.zeros(self.parameter_space.size, dtype=th.float64), requires_grad=False)

    def _make_parameter_space(self) -> ParameterSpace:
        raise NotImplementedError

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return dict(
            observation_space=self.observation_space,
            action_space=self.action_space,
            param_bounds=self.param_bounds,
            param_decimals=self.param_decimals,
        )

    def get_flat(self) -> np.ndarray:
        """The current parameters as a flat float64 numpy vector (a copy)."""
        return self.theta.detach().cpu().numpy().astype(np.float64, copy=True)

    def set_flat(self, params: np.ndarray) -> None:
        """Set the parameters from a flat vector; it must already be legal (see :meth:`ParameterSpace.project`)."""
        vec = np.asarray(params, dtype=np.float64).reshape(-1)
        if vec.size != self.parameter_space.size:
            raise ValueError(f"Expected {self.parameter_space.size} parameters, got {vec.size}")
        with th.no_grad():
            self.theta.copy_(th.as_tensor(vec, dtype=th.float64))

    def act(self, observations: np.ndarray, params: np.ndarray | None = None) -> np.ndarray:
        """
        Batched numpy forward pass.

        :param observations: A batch of observations (first axis = batch).
        :param params: The parameter vector to act with; defaults to the policy's own.
        :return: A batch of actions.
        """
        raise NotImplementedError

    def actor(self, params: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """A fast batched forward pass for a fixed parameter vector (precomputes what it can)."""
        params = np.asarray(params, dtype=np.float64).copy()
        return lambda observations: self.act(observations, params)

    def layout_lines(self) -> tuple[str, ...]:
        """How the flat parameters map onto the policy, in words, for prompts."""
        raise NotImplementedError

    def forward(self, obs: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        return self._predict(obs, deterministic)

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        assert isinstance(observation, th.Tensor)
        actions = self.act(observation.detach().cpu().numpy())
        return th.as_tensor(actions)


class LinearPolicy(CompactPolicy):
    """
    Linear policy ``y = s @ W + b`` for ``Box`` observations (see the module docstring for the layout).

    :param observation_space: A non-image ``Box`` (flattened).
    :param action_space: ``Discrete`` (argmax) or a bounded ``Box`` (clipped).
    :param param_bounds: Range of every parameter.
    :param param_decimals: Precision of every parameter, in decimals.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        param_bounds: tuple[float, float] = (-6.0, 6.0),
        param_decimals: int = 1,
    ) -> None:
        if not isinstance(observation_space, spaces.Box) or is_image_space(observation_space, check_channels=False):
            raise ValueError(
                f"LinearPolicy ('MlpLinear') needs a non-image Box observation space, got {observation_space}. "
                "Use 'Tabular' for Discrete observations; Dict, Tuple, MultiDiscrete, MultiBinary and image "
                "observations are not supported."
            )
        if isinstance(action_space, spaces.Discrete):
            self.act_dim = int(action_space.n)
        elif isinstance(action_space, spaces.Box):
            if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
                raise ValueError(f"LinearPolicy needs a bounded Box action space (actions are clipped), got {action_space}")
            self.act_dim = int(np.prod(action_space.shape))
        else:
            raise ValueError(
                f"LinearPolicy supports Discrete and bounded Box action spaces, got {action_space} "
                "(MultiDiscrete, MultiBinary, Dict and Tuple actions are not supported)."
            )
        self.obs_dim = int(np.prod(observation_space.shape))
        super().__init__(observation_space, action_space, param_bounds, param_decimals)

    def _make_parameter_space(self) -> ParameterSpace:
        low, high = self.param_bounds
        return ParameterSpace(self.obs_dim * self.act_dim + self.act_dim, low=low, high=high, decimals=self.param_decimals)

    def weights(self, params: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(W, b)`` of shape ``(obs_dim, act_dim)`` and ``(act_dim,)`` from a flat vector."""
        theta = self.get_flat() if params is None else np.asarray(params, dtype=np.float64)
        split = self.obs_dim * self.act_dim
        return theta[:split].reshape(self.obs_dim, self.act_dim), theta[split:]

    def act(self, observations: np.ndarray, params: np.ndarray | None = None) -> np.ndarray:
        return self.actor(self.get_flat() if params is None else params)(observations)

    def actor(self, params: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """The forward pass of ``params``: ``y`` is computed as a C-contiguous float64 ``(batch, obs_dim)`` matrix times
        ``W``, plus ``b``, whatever the layout of the observations given, so the actions never depend on it."""
        w, b = (x.copy() for x in self.weights(params))
        obs_dim = self.obs_dim
        if isinstance(self.action_space, spaces.Discrete):
            start = int(self.action_space.start)

            def discrete(observations: np.ndarray) -> np.ndarray:
                y = np.ascontiguousarray(observations, dtype=np.float64).reshape(-1, obs_dim) @ w
                y += b
                actions = y.argmax(axis=1)
                if start:
                    actions += start
                return actions

            return discrete
        assert isinstance(self.action_space, spaces.Box)
        low = self.action_space.low.reshape(-1).astype(np.float64)
        high = self.action_space.high.reshape(-1).astype(np.float64)
        dtype, shape = self.action_space.dtype, self.action_space.shape

        def box(observations: np.ndarray) -> np.ndarray:
            y = np.ascontiguousarray(observations, dtype=np.float64).reshape(-1, obs_dim) @ w
            y += b
            return y.clip(low, high).astype(dtype).reshape(-1, *shape)

        return box

    def layout_lines(self) -> tuple[str, ...]:
        n, m = self.obs_dim, self.act_dim
        if isinstance(self.action_space, spaces.Discrete):
            start = int(self.action_space.start)
            if start == 0:
                rule = f"the action is the index j of the largest y[j] (j = 0..{m - 1})"
            else:
                rule = (
                    f"the action is {_offset('j', start)}, with j the index of the largest y[j] (j = 0..{m - 1}), "
                    f"so the actions are {start}..{start + m - 1}"
                )
        else:
            rule = "the action is y, clipped to the action bounds"
        lines = [
            f"Linear policy: y = s @ W + b, with s the {n} observation values, W of shape ({n}, {m}) "
            f"and b of shape ({m},); {rule}.",
            f"Layout: params[i * {m} + j] = W[i][j] (the weight from s[i] to y[j]), and params[{n * m} + j] = b[j].",
        ]
        for i in range(n):
            idx = ", ".join(f"params[{i * m + j}]" for j in range(m))
            lines.append(f"- {idx}: W[{i}] (weights of s[{i}])")
        idx = ", ".join(f"params[{n * m + j}]" for j in range(m))
        lines.append(f"- {idx}: b (bias)")
        return tuple(lines)


class TabularPolicy(CompactPolicy):
    """
    Tabular policy for ``Discrete`` observations: ``theta[s]`` is the action taken in state ``s``.

    :param observation_space: ``Discrete(n_states)`` with at most :data:`MAX_TABULAR_STATES` states.
    :param action_space: ``Discrete``; the parameter values are its actions.
    :param param_bounds: Unused (kept so every policy takes the same arguments).
    :param param_decimals: Unused.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        param_bounds: tuple[float, float] = (-6.0, 6.0),
        param_decimals: int = 1,
    ) -> None:
        if not isinstance(observation_space, spaces.Discrete):
            raise ValueError(f"TabularPolicy ('Tabular') needs a Discrete observation space, got {observation_space}")
        if int(observation_space.n) > MAX_TABULAR_STATES:
            raise ValueError(
                f"TabularPolicy shows one value per state to the LLM; {int(observation_space.n)} states exceed the "
                f"limit of {MAX_TABULAR_STATES}"
            )
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"TabularPolicy needs a Discrete action space, got {action_space}")
        self.n_states = int(observation_space.n)
        self.obs_start = int(observation_space.start)
        self.actions = tuple(int(action_space.start) + a for a in range(int(action_space.n)))
        super().__init__(observation_space, action_space, param_bounds, param_decimals)
        self.set_flat(np.full(self.n_states, self.actions[0], dtype=np.float64))

    def _make_parameter_space(self) -> ParameterSpace:
        return ParameterSpace(self.n_states, values=self.actions)

    def act(self, observations: np.ndarray, params: np.ndarray | None = None) -> np.ndarray:
        theta = self.get_flat() if params is None else np.asarray(params, dtype=np.float64)
        states = np.asarray(observations).reshape(-1).astype(np.int64) - self.obs_start
        outside = (states < 0) | (states >= self.n_states)
        if outside.any():
            bad = int(states[outside][0]) + self.obs_start
            raise ValueError(f"observation {bad} is outside the observation space {self.observation_space}")
        return theta[states].astype(np.int64)

    def layout_lines(self) -> tuple[str, ...]:
        """The state-to-parameter mapping; the allowed values are stated by the prompt's parameter section."""
        first, last = self.obs_start, self.obs_start + self.n_states - 1
        if first == 0:
            return (
                f"Tabular policy: params[s] is the action taken in state s, for the {self.n_states} states s = 0..{last}.",
            )
        return (
            f"Tabular policy: params[{_offset('s', -first)}] is the action taken in state s, for the {self.n_states} "
            f"states s = {first}..{last} (params[0] is state {first}, params[{self.n_states - 1}] is state {last}).",
        )


MlpLinear = LinearPolicy
Tabular = TabularPolicy

POLICY_ALIASES: dict[str, type[BasePolicy]] = {
    "MlpLinear": LinearPolicy,
    "LinearPolicy": LinearPolicy,
    "Tabular": TabularPolicy,
    "TabularPolicy": TabularPolicy,
}
"""The policy names ``R2PO`` accepts."""
