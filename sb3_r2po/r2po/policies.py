"""Compact policies whose flat parameter vector an LLM reads and writes: ``"MlpLinear"`` (:class:`LinearPolicy`),
``"Tabular"`` (:class:`TabularPolicy`) and the reference's ``"ProjectedMlp"`` and ``"RandomFeatures"``. ``theta`` is a
float64 torch parameter (an exact ``save``/``load``); rollouts act through a numpy forward of any candidate vector."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypedDict

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import get_flattened_obs_dim, is_image_space
from stable_baselines3.common.type_aliases import PyTorchObs
from typing_extensions import Unpack

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.sandbox import CodeSandbox, PolicyError

MAX_TABULAR_STATES = 1000  # one value per state must fit in a prompt
OBSERVATION_SPACES = (  # the words of the error that refuses an unsupported observation space
    "R2PO's policies take Box (not an image), MultiDiscrete and MultiBinary observations ('MlpLinear'; 'ProjectedMlp' "
    "and 'RandomFeatures': Box only) and Discrete ones ('Tabular'); Dict, Tuple, Graph, Text and image observations "
    "are not supported"
)


def short_name(policy: str | type, aliases: Mapping[str, type]) -> str | None:
    """The first name ``aliases`` gives the class of a policy name or class (the settings table's name for it)."""
    cls = aliases.get(policy) if isinstance(policy, str) else policy
    return next((name for name, alias_class in aliases.items() if alias_class is cls), None)


def _offset(name: str, offset: int) -> str:
    """``name`` plus an integer offset as prompt text: ``j + 5``, ``s - 10``, ``j``."""
    return f"{name} {'+' if offset > 0 else '-'} {abs(offset)}" if offset else name


class CompactPolicy(BasePolicy):
    """A flat parameter vector with a known parameter space; actions: the argmax or the clipped (or squashed) ``act_dim``
    outputs of :meth:`outputs`, subclasses setting ``obs_dim`` and ``act_dim`` first (:class:`TabularPolicy`: a lookup).

    :param observation_space: The observation space of the environment.
    :param action_space: The action space of the environment.
    :param param_bounds: Range of every parameter (continuous parameter spaces).
    :param param_decimals: Precision of every parameter, in decimals (continuous parameter spaces).
    :param squash_output: For ``Box`` actions, whether ``y`` is squashed into the bounds instead of clipped, as
        sb3-contrib ARS's policies: ``low + (tanh(y) + 1) / 2 * (high - low)``.
    """

    observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)  # a Box only when not an image
    kind: ClassVar[str] = "linear"  # what the prompts call the policy: "improving a <kind> policy"
    saved_arguments: ClassVar[tuple[str, ...]] = ("param_bounds", "param_decimals")  # constructor arguments saved
    init_std: float = 3.0
    obs_dim: int
    act_dim: int

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        param_bounds: tuple[float, float] = (-6.0, 6.0),
        param_decimals: int = 1,
        squash_output: bool = False,
    ) -> None:
        super().__init__(observation_space, action_space, squash_output=isinstance(action_space, spaces.Box) and squash_output)
        self.param_bounds, self.param_decimals = (float(param_bounds[0]), float(param_bounds[1])), int(param_decimals)
        self.parameter_space = self._make_parameter_space()
        self.theta = th.nn.Parameter(th.zeros(self.parameter_space.size, dtype=th.float64), requires_grad=False)

    @classmethod
    def check_observation_space(cls, observation_space: spaces.Space) -> None:
        """Raise a ``ValueError`` naming the supported spaces unless the policy takes ``observation_space`` (no image)."""
        image = isinstance(observation_space, spaces.Box) and is_image_space(observation_space, check_channels=False)
        if isinstance(observation_space, cls.observation_spaces) and not image:
            return
        what = "image" if image else type(observation_space).__name__
        raise ValueError(
            f"{cls.title()} does not support the observation space {observation_space} ({what} observations): "
            f"{OBSERVATION_SPACES}."
        )

    @classmethod
    def title(cls) -> str:
        """The class's name and the short name ``R2PO`` takes for it, for messages: ``LinearPolicy ('MlpLinear')``."""
        alias = short_name(cls, POLICY_ALIASES)
        return cls.__name__ if alias in (None, cls.__name__) else f"{cls.__name__} ({alias!r})"

    def _size(self) -> int:
        raise NotImplementedError

    def _make_parameter_space(self) -> ParameterSpace:
        low, high = self.param_bounds
        return ParameterSpace(self._size(), low=low, high=high, decimals=self.param_decimals, init_std=self.init_std)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        saved = {name: getattr(self, name) for name in self.saved_arguments}
        return dict(observation_space=self.observation_space, action_space=self.action_space, **saved)

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

    def place(self, record: Mapping[str, Any]) -> None:
        """Take the vector of a history record."""
        self.set_flat(np.asarray(record["params"], dtype=np.float64))

    def act(self, observations: np.ndarray, params: np.ndarray | None = None) -> np.ndarray:
        """The actions of a batch of ``observations`` (first axis: batch) under ``params`` (default: the policy's own)."""
        return self.actor(self._theta(params))(observations)

    def _theta(self, params: np.ndarray | None) -> np.ndarray:
        return self.get_flat() if params is None else np.asarray(params, dtype=np.float64).reshape(-1)

    def actor(self, params: np.ndarray, clip: bool = True) -> Callable[[np.ndarray], np.ndarray]:
        """A batched forward pass of ``params``; ``clip=False``: a ``Box`` action is ``y`` itself (the ablations')."""
        outputs, to_actions = self.outputs(params), _to_actions(self.action_space, clip, self.squash_output)
        return lambda observations: to_actions(outputs(observations))

    def layout_lines(self, clip: bool = True) -> tuple[str, ...]:
        """How the flat parameters map onto the policy, for prompts; ``clip``: whether training clips continuous actions."""
        raise NotImplementedError

    def summary_lines(self) -> tuple[str, ...]:
        """What the black-box Search prompts (r2po, props) say about the policy: nothing, as the reference's."""
        return ()

    def forward(self, obs: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        return self._predict(obs, deterministic)

    def outputs(self, params: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """The outputs ``y`` (``(batch, act_dim)``, float64) of ``params`` before they become actions."""
        raise NotImplementedError

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        assert isinstance(observation, th.Tensor)
        observations = observation.detach().cpu().numpy()
        if self.squash_output:  # tanh(y), which predict() maps onto the bounds, as the actor does
            return th.as_tensor(np.tanh(self.outputs(self.get_flat())(observations)))
        return th.as_tensor(self.act(observations))


class LinearPolicy(CompactPolicy):
    """sb3-contrib ARS's ``LinearPolicy`` ``y = x @ W + b``, ``x`` the observation as SB3's ``preprocess_obs`` gives it
    (one-hot per ``MultiDiscrete`` value); flat layout ``params[i * act_dim + j] = W[i, j]``, then ``b``.

    :param observation_space: A non-image ``Box``, a ``MultiDiscrete`` (one dimension of values) or a ``MultiBinary``.
    :param action_space: ``Discrete`` (argmax) or a bounded ``Box`` (clipped, or squashed with ``squash_output``).
    :param param_bounds: Range of every parameter.
    :param param_decimals: Precision of every parameter, in decimals.
    :param with_bias: Whether ``y`` has the bias ``b`` (``act_dim`` parameters more), as ARS's ``with_bias``.
    :param squash_output: For ``Box`` actions, ``tanh`` scaled into the bounds instead of clipping.
    """

    observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)
    saved_arguments = (*CompactPolicy.saved_arguments, "with_bias", "squash_output")

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        param_bounds: tuple[float, float] = (-6.0, 6.0),
        param_decimals: int = 1,
        with_bias: bool = True,
        squash_output: bool = False,
    ) -> None:
        if isinstance(observation_space, spaces.MultiDiscrete) and observation_space.nvec.ndim != 1:
            raise ValueError(f"LinearPolicy needs a MultiDiscrete observation space of one dimension, got {observation_space}")
        self.obs_dim, self.act_dim = _vector_dims(type(self), observation_space, action_space)
        self.with_bias = bool(with_bias)
        super().__init__(observation_space, action_space, param_bounds, param_decimals, squash_output)

    def _size(self) -> int:
        return self.obs_dim * self.act_dim + (self.act_dim if self.with_bias else 0)

    def weights(self, params: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(W, b)`` of shape ``(obs_dim, act_dim)`` and ``(act_dim,)`` (zeros without ``with_bias``) from a flat vector."""
        return _split(self._theta(params), self.obs_dim, self.act_dim, self.with_bias, self.act_dim)

    def outputs(self, params: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """``y`` of ``params``: the C-contiguous float64 features (whatever the input's layout) times ``W``, plus ``b``."""
        w, b = (x.copy() for x in self.weights(params))
        features = _features(self.observation_space, self.obs_dim)
        return lambda observations: features(observations) @ w + b

    def layout_lines(self, clip: bool = True) -> tuple[str, ...]:
        n, m = self.obs_dim, self.act_dim
        rule = _output_rule(self.action_space, m, self.squash_output, clip)
        if isinstance(self.action_space, spaces.Discrete) and int(self.action_space.start) != 0:
            rule += f", so the actions are {int(self.action_space.start)}..{int(self.action_space.start) + m - 1}"
        x, inputs, names = _input_names(self.observation_space)
        y = f"y = {x} @ W + b" if self.with_bias else f"y = {x} @ W (no bias)"
        shapes = f"W of shape ({n}, {m}) and b of shape ({m},)" if self.with_bias else f"W of shape ({n}, {m})"
        bias = f", and params[{n * m} + j] = b[j]." if self.with_bias else "."
        lines = [
            f"Linear policy: {y}, with {inputs}, {shapes}; {rule}.",
            f"Layout: params[i * {m} + j] = W[i][j] (the weight from {x}[i] to y[j]){bias}",
        ]
        for i, name in enumerate(names):
            lines.append(f"- {', '.join(f'params[{i * m + j}]' for j in range(m))}: W[{i}] (weights of {name})")
        if self.with_bias:
            lines.append(f"- {', '.join(f'params[{n * m + j}]' for j in range(m))}: b (bias)")
        return tuple(lines)


def _split(flat: np.ndarray, rows: int, cols: int, with_bias: bool, n_bias: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``(rows, cols)`` matrix of ``flat``'s first values, then the bias: the rest, or ``n_bias`` zeros."""
    return flat[: rows * cols].reshape(rows, cols), flat[rows * cols :] if with_bias else np.zeros(n_bias)


def _features(observation_space: spaces.Space, obs_dim: int) -> Callable[[np.ndarray], np.ndarray]:
    """Observations as the float64 ``(batch, obs_dim)`` features of SB3's ``preprocess_obs`` (one-hot for MultiDiscrete)."""
    if not isinstance(observation_space, spaces.MultiDiscrete):
        return lambda observations: np.ascontiguousarray(observations, dtype=np.float64).reshape(-1, obs_dim)
    nvec = observation_space.nvec.astype(np.int64)
    start = np.broadcast_to(np.asarray(observation_space.start, dtype=np.int64), nvec.shape)
    offsets = np.concatenate(([0], np.cumsum(nvec)[:-1]))

    def one_hot(observations: np.ndarray) -> np.ndarray:
        values = np.asarray(observations).reshape(-1, nvec.size).astype(np.int64) - start
        outside = (values < 0) | (values >= nvec)
        if outside.any():
            row = np.asarray(observations).reshape(-1, nvec.size)[np.flatnonzero(outside.any(axis=1))[0]]
            raise ValueError(f"observation {row.tolist()} is outside the observation space {observation_space}")
        features = np.zeros((len(values), obs_dim), dtype=np.float64)
        np.put_along_axis(features, values + offsets, 1.0, axis=1)
        return features

    return one_hot


def _input_names(observation_space: spaces.Space) -> tuple[str, str, list[str]]:
    """The input's name (``s``, or ``x`` for one-hot features), its introduction, and each value's name."""
    if isinstance(observation_space, spaces.MultiDiscrete):
        nvec = observation_space.nvec.tolist()
        starts = np.broadcast_to(np.asarray(observation_space.start), observation_space.nvec.shape).tolist()
        entries = [(i, first + v, n) for i, (n, first) in enumerate(zip(nvec, starts, strict=True)) for v in range(n)]
        names = [f"x[{k}]: s[{i}] = {v}, one-hot over {n}" for k, (i, v, n) in enumerate(entries)]
        inputs = (
            f"x the {len(names)} one-hot features of the {len(nvec)} observation values s "
            "(x[k] is 1 when s[i] has the value its line below names, else 0)"
        )
        return "x", inputs, names
    n = get_flattened_obs_dim(observation_space)
    values = " (each 0 or 1)" if isinstance(observation_space, spaces.MultiBinary) else ""
    return "s", f"s the {n} observation values{values}", [f"s[{i}]" for i in range(n)]


class TabularPolicy(CompactPolicy):
    """Tabular policy for ``Discrete`` observations: ``theta[s]`` is the action taken in state ``s``.

    :param observation_space: ``Discrete(n_states)`` with at most ``MAX_TABULAR_STATES`` (1000) states.
    :param action_space: ``Discrete``; the parameter values are its actions.
    :param param_bounds: Unused (kept so every policy takes the same arguments).
    :param param_decimals: Unused.
    """

    kind: ClassVar[str] = "tabular"
    observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete,)

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        param_bounds: tuple[float, float] = (-6.0, 6.0),
        param_decimals: int = 1,
    ) -> None:
        self.check_observation_space(observation_space)
        assert isinstance(observation_space, spaces.Discrete)
        if int(observation_space.n) > MAX_TABULAR_STATES:
            raise ValueError(
                f"TabularPolicy shows one value per state to the LLM; {int(observation_space.n)} states exceed the "
                f"limit of {MAX_TABULAR_STATES}"
            )
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"TabularPolicy needs a Discrete action space, got {action_space}")
        self.n_states, self.obs_start = int(observation_space.n), int(observation_space.start)
        self.actions = tuple(int(action_space.start) + a for a in range(int(action_space.n)))
        super().__init__(observation_space, action_space, param_bounds, param_decimals)
        self.set_flat(np.full(self.n_states, self.actions[0], dtype=np.float64))

    def _make_parameter_space(self) -> ParameterSpace:
        return ParameterSpace(self.n_states, values=self.actions)

    def act(self, observations: np.ndarray, params: np.ndarray | None = None) -> np.ndarray:
        theta = self._theta(params)
        states = np.asarray(observations).reshape(-1).astype(np.int64) - self.obs_start
        outside = (states < 0) | (states >= self.n_states)
        if outside.any():
            bad = int(states[outside][0]) + self.obs_start
            raise ValueError(f"observation {bad} is outside the observation space {self.observation_space}")
        return theta[states].astype(np.int64)

    def actor(self, params: np.ndarray, clip: bool = True) -> Callable[[np.ndarray], np.ndarray]:
        params = np.asarray(params, dtype=np.float64).copy()
        return lambda observations: self.act(observations, params)

    def layout_lines(self, clip: bool = True) -> tuple[str, ...]:
        """The state-to-parameter mapping; the allowed values are stated by the prompt's parameter section."""
        first, last = self.obs_start, self.obs_start + self.n_states - 1
        where = f" (params[0] is state {first}, params[{self.n_states - 1}] is state {last})" if first else ""
        return (
            f"Tabular policy: params[{_offset('s', -first)}] is the action taken in state s, for the {self.n_states} "
            f"states s = {first}..{last}{where}.",
        )


PROJECTED_MLP_SEED = 3001  # the reference's projection_seed_base (3000, its Swimmer configs) + a first run's index (1)
RANDOM_FEATURES_SEED = 1001  # the reference's random_feature_seed_base (1000) + a first run's index (1)


def _vector_dims(policy: type[CompactPolicy], observation_space: spaces.Space, action_space: spaces.Space) -> tuple[int, int]:
    """``(obs_dim, act_dim)``: SB3's flattened observation size, one output per ``Discrete`` action or ``Box`` dimension."""
    policy.check_observation_space(observation_space)
    obs_dim = int(get_flattened_obs_dim(observation_space))
    if isinstance(action_space, spaces.Discrete):
        return obs_dim, int(action_space.n)
    if isinstance(action_space, spaces.Box) and np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all():
        return obs_dim, int(np.prod(action_space.shape))
    raise ValueError(f"{policy.title()} supports Discrete and bounded Box action spaces, got {action_space}")


def _to_actions(action_space: spaces.Space, clip: bool, squash: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """Outputs ``y`` to actions: the argmax plus ``start``; ``y`` clipped (or not), or squashed (SB3's ``unscale_action``)."""
    if isinstance(action_space, spaces.Discrete):
        start = int(action_space.start)
        return lambda y: y.argmax(axis=1) + start
    assert isinstance(action_space, spaces.Box)
    dtype, shape = action_space.dtype, action_space.shape
    if squash:
        bottom, top = action_space.low.reshape(-1), action_space.high.reshape(-1)
        return lambda y: (bottom + (0.5 * (np.tanh(y) + 1.0) * (top - bottom))).astype(dtype).reshape(-1, *shape)
    low, high = action_space.low.reshape(-1).astype(np.float64), action_space.high.reshape(-1).astype(np.float64)
    return lambda y: (y.clip(low, high) if clip else y).astype(dtype).reshape(-1, *shape)


def _output_rule(action_space: spaces.Space, n_outputs: int, squash: bool = False, clip: bool = True) -> str:
    """The prompt's words for :func:`_to_actions`."""
    if isinstance(action_space, spaces.Discrete):
        start = int(action_space.start)
        if start == 0:
            return f"the action is the index j of the largest y[j] (j = 0..{n_outputs - 1})"
        return f"the action is {_offset('j', start)}, with j the index of the largest y[j] (j = 0..{n_outputs - 1})"
    if squash:
        return "the action is y squashed into the action bounds: low + (tanh(y) + 1) / 2 * (high - low)"
    return "the action is y, clipped to the action bounds" if clip else "the action is y itself (not clipped to the bounds)"


class FixedMatrixOptions(TypedDict, total=False):
    """The keyword arguments of :class:`FixedMatrixPolicy` and its subclasses; one not given: the class's attribute."""

    param_bounds: tuple[float, float]  #: Range of every parameter.
    param_decimals: int  #: Precision of every parameter, in decimals.
    hidden_dim: int  #: Hidden units (random features).
    projection_seed: int  #: Seed of the fixed matrices.
    with_bias: bool  #: Whether every layer has a bias.
    squash_output: bool  #: ``tanh`` scaled into the bounds instead of clipping ``Box`` actions (:class:`CompactPolicy`).
    init_std: float  #: Standard deviation of a warm-up draw of each parameter (then clipped and rounded).


class FixedMatrixPolicy(CompactPolicy):
    """A :class:`CompactPolicy` with ``hidden_dim`` hidden units and fixed matrices drawn with
    ``numpy.random.RandomState(projection_seed)`` (:meth:`_draw`), kept as module buffers (saved with the model)."""

    saved_arguments: ClassVar[tuple[str, ...]] = tuple(FixedMatrixOptions.__annotations__)
    hidden_dim: int
    projection_seed: int

    def __init__(
        self, observation_space: spaces.Space, action_space: spaces.Space, **options: Unpack[FixedMatrixOptions]
    ) -> None:
        if unknown := set(options).difference(FixedMatrixOptions.__annotations__):  # as Python's own check
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {sorted(unknown)}")
        self.obs_dim, self.act_dim = _vector_dims(type(self), observation_space, action_space)
        self.hidden_dim = int(options.get("hidden_dim", self.hidden_dim))
        self.projection_seed = int(options.get("projection_seed", self.projection_seed))
        self.init_std = float(options.get("init_std", self.init_std))
        self.with_bias = bool(options.get("with_bias", True))
        if self.hidden_dim < 1:
            raise ValueError(f"hidden_dim must be >= 1, got {options['hidden_dim']}")
        matrices = self._draw(np.random.RandomState(self.projection_seed))
        bounds, decimals = options.get("param_bounds", self.param_bounds), options.get("param_decimals", 1)
        super().__init__(observation_space, action_space, bounds, decimals, options.get("squash_output", False))
        for name, matrix in matrices.items():
            self.register_buffer(name, th.as_tensor(matrix, dtype=th.float64))

    def _draw(self, rng: np.random.RandomState) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def fixed_matrices(self) -> tuple[np.ndarray, ...]:
        """The fixed matrices, in the order :meth:`_draw` gives them."""
        return tuple(buffer.detach().cpu().numpy() for buffer in self.buffers())


class ProjectedMlpPolicy(FixedMatrixPolicy):
    """The reference's ``ProjectedMLPPolicy``: ``y = tanh(s @ W1 + b1) @ W2 + b2``, layer ``l``'s flattened weights and
    bias ``decoded_weight_scale * Q_l @ z_l``, ``Q_l`` a fixed orthonormal projection (the Policies page).

    :param observation_space: A non-image ``Box`` (flattened).
    :param action_space: ``Discrete`` (argmax of ``y``) or a bounded ``Box`` (``y`` clipped).
    :param latent_dim_layer1: Latent values of layer 1, at most its weight and bias count.
    :param latent_dim_layer2: Latent values of layer 2, at most its weight and bias count.
    :param decoded_weight_scale: Factor of the decoded weights.
    :param shared: :class:`FixedMatrixOptions`; defaults: the class attributes (the reference's, the Policies page).
    """

    saved_arguments = (*FixedMatrixPolicy.saved_arguments, "latent_dim_layer1", "latent_dim_layer2", "decoded_weight_scale")
    kind: ClassVar[str] = "neural-network"
    param_bounds, hidden_dim, projection_seed, init_std = (-6.0, 6.0), 4, PROJECTED_MLP_SEED, 2.0

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        latent_dim_layer1: int = 5,
        latent_dim_layer2: int = 5,
        decoded_weight_scale: float = 1.0,
        **shared: Unpack[FixedMatrixOptions],
    ) -> None:
        self.latent_dim_layer1, self.latent_dim_layer2 = int(latent_dim_layer1), int(latent_dim_layer2)
        self.decoded_weight_scale = float(decoded_weight_scale)
        super().__init__(observation_space, action_space, **shared)

    def _draw(self, rng: np.random.RandomState) -> dict[str, np.ndarray]:
        n, h, m = self.obs_dim, self.hidden_dim, self.act_dim
        self.layer_sizes = (n * h + (h if self.with_bias else 0), h * m + (m if self.with_bias else 0))
        shapes = tuple(zip(self.layer_sizes, (self.latent_dim_layer1, self.latent_dim_layer2), strict=True))
        for layer, (size, latent) in enumerate(shapes, start=1):
            if not 1 <= latent <= size:
                raise ValueError(f"latent_dim_layer{layer} must be in 1..{size} (the layer's parameters), got {latent}")
        projections = [np.linalg.qr(rng.randn(size, latent))[0] for size, latent in shapes]
        return {"projection1": projections[0], "projection2": projections[1]}

    def _size(self) -> int:
        return self.latent_dim_layer1 + self.latent_dim_layer2

    def weights(self, params: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The decoded ``(W1, b1, W2, b2)`` of shapes ``(obs_dim, hidden_dim)``, ``(hidden_dim,)``, ``(hidden_dim, act_dim)``
        and ``(act_dim,)`` (zero biases without ``bias``) from a flat latent vector."""
        theta = self._theta(params)
        (q1, q2), (n, h, m) = self.fixed_matrices(), (self.obs_dim, self.hidden_dim, self.act_dim)
        w1, b1 = _split(self.decoded_weight_scale * (q1 @ theta[: self.latent_dim_layer1]), n, h, self.with_bias, h)
        w2, b2 = _split(self.decoded_weight_scale * (q2 @ theta[self.latent_dim_layer1 :]), h, m, self.with_bias, m)
        return w1, b1, w2, b2

    def outputs(self, params: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        w1, b1, w2, b2 = self.weights(params)
        features = _features(self.observation_space, self.obs_dim)
        return lambda observations: np.tanh(features(observations) @ w1 + b1) @ w2 + b2

    def layout_lines(self, clip: bool = True) -> tuple[str, ...]:
        """The network and the opaque latent vector, as the reference's prompts give them (no projections shown)."""
        n, h, m = self.obs_dim, self.hidden_dim, self.act_dim
        return (
            f"Two-layer neural-network policy: s (the {n} observation values) -> {h} hidden units with tanh activation "
            f"-> y ({m} values); {_output_rule(self.action_space, m, self.squash_output, clip)}.",
            f"The {self.parameter_space.size} params are opaque controls of this network: together they set all "
            f"{sum(self.layer_sizes)} of its weights and biases, and no param is the weight of a single observation value. "
            "Judge a vector by the behaviour of the whole policy it gives, and prefer coherent, moderate changes to "
            "large swings unless the history clearly supports them.",
        )

    summary_lines = layout_lines  # the network and the opaque params, as the reference's ProPS prompt tells its Search


class RandomFeaturesPolicy(FixedMatrixPolicy):
    """The reference's ``RandomFeaturePolicy``: ``h = tanh(R @ clip(s / obs_scale, -obs_clip, obs_clip) + c)`` with fixed
    random ``R`` and ``c``, ``y = output_gain * (theta @ h + bias)``; ``params[k * hidden_dim + j] = theta[k, j]``.

    :param observation_space: A non-image ``Box`` (flattened).
    :param action_space: ``Discrete`` (argmax of ``y``) or a bounded ``Box`` (``y`` clipped).
    :param obs_scale: The observation is divided by it before the features.
    :param obs_clip: ... then clipped to ``[-obs_clip, obs_clip]``.
    :param output_gain: Factor of the readout.
    :param shared: :class:`FixedMatrixOptions`; defaults: the class attributes (the reference's, the Policies page).
    """

    saved_arguments = (*FixedMatrixPolicy.saved_arguments, "obs_scale", "obs_clip", "output_gain")
    kind: ClassVar[str] = "random-feature"
    param_bounds, hidden_dim, projection_seed, init_std = (-2.0, 2.0), 8, RANDOM_FEATURES_SEED, 0.75

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        obs_scale: float = 3.0,
        obs_clip: float = 5.0,
        output_gain: float = 0.5,
        **shared: Unpack[FixedMatrixOptions],
    ) -> None:
        self.obs_scale, self.obs_clip, self.output_gain = float(obs_scale), float(obs_clip), float(output_gain)
        if not (self.obs_scale > 0 and self.obs_clip > 0):
            raise ValueError(f"obs_scale and obs_clip must be > 0, got {obs_scale} and {obs_clip}")
        super().__init__(observation_space, action_space, **shared)

    def _draw(self, rng: np.random.RandomState) -> dict[str, np.ndarray]:
        feature_weight = rng.randn(self.hidden_dim, self.obs_dim) / np.sqrt(self.obs_dim)
        return {"feature_weight": feature_weight, "feature_bias": rng.uniform(-0.1, 0.1, size=self.hidden_dim)}

    def _size(self) -> int:
        return self.act_dim * self.hidden_dim + (self.act_dim if self.with_bias else 0)

    def weights(self, params: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The readout ``(theta, bias)``: ``(act_dim, hidden_dim)`` and ``(act_dim,)`` (zeros without ``with_bias``)."""
        return _split(self._theta(params), self.act_dim, self.hidden_dim, self.with_bias, self.act_dim)

    def outputs(self, params: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        theta, bias = self.weights(params)
        readout, offset = self.output_gain * theta.T, self.output_gain * bias
        r, c = (x.copy() for x in self.fixed_matrices())
        features, scale, limit = _features(self.observation_space, self.obs_dim), self.obs_scale, self.obs_clip
        return lambda observations: (
            np.tanh(np.clip(features(observations) / scale, -limit, limit) @ r.T + c) @ readout + offset
        )

    def layout_lines(self, clip: bool = True) -> tuple[str, ...]:
        """The fixed features, the readout and its layout, as the reference's prompts give them."""
        n, h, m = self.obs_dim, self.hidden_dim, self.act_dim
        bias = " + bias[k]" if self.with_bias else ""
        lines = [
            f"Random-feature policy: h[j] = tanh(R[j] . x + c[j]) for the {h} features j = 0..{h - 1}, where x is s (the "
            f"{n} observation values) divided by {self.obs_scale:g} and clipped to [-{self.obs_clip:g}, {self.obs_clip:g}], "
            f"and R and c were drawn at random once and stay fixed (they are not params); then "
            f"y[k] = {self.output_gain:g} * (sum over j of theta[k][j] * h[j]{bias}) for k = 0..{m - 1}; "
            f"{_output_rule(self.action_space, m, self.squash_output, clip)}.",
            "The params are the trainable linear readout on top of the fixed nonlinear features: each one weights an "
            "abstract feature, not a single observation value.",
            f"Layout: params[k * {h} + j] = theta[k][j] (the weight of h[j] in y[k])"
            + (f", and params[{m * h} + k] = bias[k]." if self.with_bias else "."),
        ]
        for k in range(m):
            lines.append(f"- params[{k * h}] to params[{k * h + h - 1}]: theta[{k}] (the feature weights of y[{k}])")
        if self.with_bias:
            lines.append("- " + ", ".join(f"params[{m * h + k}]" for k in range(m)) + ": bias")
        return tuple(lines)


Code = tuple[str, str]  # a code policy's candidate: its source and the name of its policy class


class CodePolicy(BasePolicy):
    """Python source an LLM wrote (``variant="promptpo"``: the Code policies page), run only in a
    :class:`~sb3_r2po.common.sandbox.CodeSandbox` worker, started at the first ``predict()``, never pickled.

    :param observation_space: The observation space of the environment.
    :param action_space: The action space of the environment.
    :param sandbox: ``"strict"`` (a hardened worker process, Linux only) or ``"trusted"`` (this process, no protection).
    :param call_timeout: Seconds one batch of observations may take (strict); past it the candidate fails.
    :param episode_timeout: Seconds (wall time, the env's steps included) an episode of training may last; past them too.
    :param memory_mb: The worker's memory limit in MiB (strict).
    :param descriptions: Prompt texts replacing the generated ``observation``, ``implementation`` and ``reward`` (CodeTask's).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        sandbox: str = "strict",
        call_timeout: float = 1.0,
        episode_timeout: float = 60.0,
        memory_mb: int = 1024,
        descriptions: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(observation_space, action_space)
        self.sandbox, self.memory_mb = sandbox, int(memory_mb)
        self.call_timeout, self.episode_timeout = float(call_timeout), float(episode_timeout)
        self.descriptions: dict[str, Any] = dict(descriptions or {})
        self.code: Code | None = None  # the placed candidate (a history record's)
        self._worker: CodeSandbox | None = None

    def _get_constructor_parameters(self) -> dict[str, Any]:
        names = "observation_space action_space sandbox call_timeout episode_timeout memory_mb descriptions".split()
        return {name: getattr(self, name) for name in names}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_worker": None}

    def open(self, code: Code) -> CodeSandbox:
        """A sandbox running ``code`` (the caller closes it); a :class:`PolicyError` where the code cannot be loaded."""
        return CodeSandbox(
            code[0], class_name=code[1], mode=self.sandbox, call_timeout=self.call_timeout, memory_mb=self.memory_mb
        )

    def actor(self, code: Code, clip: bool = True) -> Callable[[np.ndarray], np.ndarray]:
        """The batched ``act`` of ``code`` in a new sandbox (closed when dropped); invalid actions raise a PolicyError."""
        act, space = self.open(code).act, self.action_space

        def checked(observations: np.ndarray) -> np.ndarray:
            actions = act(observations)
            bad = actions.shape != (len(observations), *(space.shape or ()))
            if not bad and isinstance(space, spaces.Discrete):
                bad = actions.dtype.kind not in "biu" or not all(space.contains(int(a)) for a in actions)
            if bad:
                raise PolicyError(f"act returned {actions.tolist()!r:.200} for {len(observations)} observations, not {space}")
            return actions

        return checked

    def place(self, record: Mapping[str, Any]) -> None:
        """Take the code of a history record; its worker starts at the next ``predict()``."""
        if (code := (record["source"], record["policy_class"])) != self.code and self._worker is not None:
            self._worker.close()
            self._worker = None
        self.code = code

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        assert isinstance(observation, th.Tensor)
        if self.code is None:
            raise ValueError("This Code policy has no code yet: train it with learn() first")
        if self._worker is None:
            self._worker = self.open(self.code)
        return th.as_tensor(self._worker.act(observation.cpu().numpy()))


MlpLinear, Tabular, ProjectedMlp, RandomFeatures = LinearPolicy, TabularPolicy, ProjectedMlpPolicy, RandomFeaturesPolicy
_SHORT: dict[str, type[BasePolicy]] = dict(
    MlpLinear=MlpLinear, Tabular=Tabular, ProjectedMlp=ProjectedMlp, RandomFeatures=RandomFeatures, Code=CodePolicy
)
POLICY_ALIASES: dict[str, type[BasePolicy]] = {name: cls for short, cls in _SHORT.items() for name in (short, cls.__name__)}
"""The policy names ``R2PO`` accepts."""
