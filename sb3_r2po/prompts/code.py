"""PromptPO's prompts for code policies: the contexts generated from an env's spaces and reward source, the six prompts
(``templates/promptpo_*.j2``: PromptPO's parts, order and reply format, in our words), and a reply's code block and
policy class, found with :mod:`ast` (parsed, never run)."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sb3_r2po.common.parameters import final_channel
from sb3_r2po.common.sandbox import shorten_traceback
from sb3_r2po.prompts.builder import template_environment
from sb3_r2po.prompts.tasks import TASK_DESCRIPTIONS, describe_task

FENCE = "```python"
HINT_FROM = 10  # PromptPO marks the best attempt once the history has this many
Attempt = Mapping[str, Any]  # a history entry: source, returns; optional feedback and reflection (str)


def env_title(env_id: str) -> str:
    """The class-name stem of ``env_id``: its name without namespace and version, each word capitalised, letters and
    digits only (``CartPole-v1``: ``CartPole``; ``my_env``: ``MyEnv``; ``3d``: ``Env3d``). PromptPO: ``name.title()``."""
    name = re.sub(r"-v\d+$", "", env_id.rpartition("/")[2])
    title = "".join(word[:1].upper() + word[1:] for word in re.split(r"[^A-Za-z0-9]+", name))
    return title if title[:1].isalpha() else f"Env{title}"


def _space(space: spaces.Space, integer: str) -> str:
    if isinstance(space, spaces.Discrete):
        return f"{integer} in {int(space.start)}..{int(space.start) + int(space.n) - 1}"
    if not isinstance(space, spaces.Box):
        return f"an element of {space}"
    low, high = ([f"{float(v):.4g}" for v in bound.reshape(-1)] for bound in (space.low, space.high))
    same = len(set(low)) == len(set(high)) == 1
    bounds = f"every entry in [{low[0]}, {high[0]}]" if same else f"bounds [{', '.join(low)}] to [{', '.join(high)}]"
    return f"a numpy array of shape {space.shape} and dtype {space.dtype}, {bounds}"


def describe_spaces(
    env_id: str | None, observation_space: spaces.Space, action_space: spaces.Space, horizon: int
) -> tuple[str, str]:
    """PromptPO's Observation Context and Implementation Details, generated: what act(obs) receives and returns, the
    horizon and, where :data:`~sb3_r2po.prompts.tasks.TASK_DESCRIPTIONS` has ``env_id``, the task's own words.

    :param env_id: The gymnasium id (``None``: no registered description).
    :param observation_space: The env's observation space.
    :param action_space: The env's action space.
    :param horizon: The episode length cap (the env's ``TimeLimit``).
    """
    task = describe_task(env_id, observation_space, action_space)
    observation = [f"act(obs) receives one observation: {_space(observation_space, 'an integer')}."]
    action = [f"act(obs) returns one action: {_space(action_space, 'a Python or numpy integer')}."]
    action.append(f"An episode lasts at most {horizon} timesteps.")
    if env_id in TASK_DESCRIPTIONS:
        observation = [task.summary, *observation, *(re.sub(r"^s\[", "obs[", line) for line in task.observations)]
        action[1:1] = ["The actions:" if isinstance(action_space, spaces.Discrete) else "Its entries:", *task.actions]
        action.append(f"It ends earlier {task.episode_end}.")
    return "\n".join(observation), "\n".join(action)


def reward_source(env: gym.Env) -> str | None:
    """The source of the unwrapped env's ``step``, dedented, dynamics included, as the classic-control envs compute the
    reward in it (PromptPO shows hand-written reward files instead, with the reward alone).

    :param env: The env; wrappers are looked through.
    :return: The source, or ``None`` where Python has none (a C extension, a class defined interactively).
    """
    try:
        return textwrap.dedent(inspect.getsource(type(env.unwrapped).step))
    except (OSError, TypeError):
        return None


def extract_code(reply: str) -> tuple[str | None, str]:
    """The code of a reply's final channel as PromptPO takes it: from the first ```python fence to the next ```, stripped.

    :param reply: The LLM's reply.
    :return: ``(code, "")``, or ``(None, reason)``: no final channel, no fence, an unclosed or an empty block.
    """
    if (text := final_channel(reply)) is None:
        return None, "the reply has no final answer, only analysis"
    if (start := text.find(FENCE)) < 0:
        return None, f"the reply has no {FENCE} code block"
    if (end := text.find("```", start + len(FENCE))) < 0:
        return None, f"the {FENCE} code block is not closed with ```"
    code = text[start + len(FENCE) : end].strip()
    return (code, "") if code else (None, f"the {FENCE} code block is empty")


def _has_act(classes: dict[str, ast.ClassDef], name: str, seen: set[str]) -> bool:
    """Whether class ``name`` defines ``act`` (a def or an assignment) or inherits it from a class of ``classes``."""
    seen.add(name)
    body = classes[name].body
    own = {s.name for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    own |= {t.id for s in body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    bases = [b.id for b in classes[name].bases if isinstance(b, ast.Name) and b.id in classes and b.id not in seen]
    return "act" in own or any(_has_act(classes, base, seen) for base in bases)


def find_policy_class(source: str, expected_name: str) -> tuple[str | None, str]:
    """The policy class of ``source`` as PromptPO picks it, parsed and compiled, never run: the top-level class named
    ``expected_name`` in any case, else the only one with an ``act`` whose name does not contain "observation".

    :param source: The reply's code (:func:`extract_code`).
    :param expected_name: The class the prompts ask for (:attr:`CodeTask.policy_class`).
    :return: ``(class name, "")``, or ``(None, reason)``: a syntax error with its line, no such class, or several.
    """
    try:
        tree = ast.parse(source)
        compile(tree, "<policy>", "exec", dont_inherit=True)  # the checks ast.parse leaves out ('return' outside a def)
    except SyntaxError as error:
        line = f"line {error.lineno}: {(error.text or '').strip()}" if error.lineno else "no line"
        return None, f"SyntaxError: {error.msg} ({line})"
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    if named := [name for name in classes if name.lower() == expected_name.lower()]:
        return named[0], ""
    acting = [name for name in classes if "observation" not in name.lower() and _has_act(classes, name, set())]
    if len(acting) == 1:
        return acting[0], ""
    found = f"found {len(acting)}: {', '.join(acting)}" if acting else "found none"
    return None, f"the code must define a class {expected_name}, or exactly one class with act(obs) ({found})"


def _attempts(history: Sequence[Attempt]) -> list[dict[str, Any]]:
    """The entries numbered, returns listed, means, the best (first of equal means) marked from ``HINT_FROM`` on."""
    if not history:
        raise ValueError("the history is empty: the first round's prompt is CodeTask.policy()")
    means = [float(np.mean(item["returns"])) for item in history]
    best = int(np.argmax(means)) if len(history) >= HINT_FROM else -1
    entries = []
    for i, item in enumerate(history):
        shown = {"number": i + 1, "returns": repr([float(r) for r in item["returns"]]), "mean": means[i], "best": i == best}
        entries.append({"feedback": "", "reflection": "", **item, **shown})
    return entries


@dataclass(frozen=True)
class CodeTask:
    """What PromptPO's prompts show of an env, and the six prompts (plain text, one user message each).

    :param title: The class-name stem (:func:`env_title`): the policy class is ``<title>Policy``, the reward's name
        ``<title>RewardFunction``.
    :param observation: The Observation Context.
    :param implementation: The Implementation Details: the action, the horizon, the episode end.
    :param reward: What follows the reward's name: a fenced source (:func:`reward_source`) or the user's text.
    :param horizon: The timesteps per episode the prompts name.
    :param observation_kind: One observation, as the Feedback prompts describe traj's entries.
    :param episodes: The episodes per candidate the prompts name (PromptPO: 5).
    """

    title: str
    observation: str
    implementation: str
    reward: str
    horizon: int
    observation_kind: str = "a numpy array"
    episodes: int = 5

    @classmethod
    def for_env(cls, env: gym.Env, horizon: int | None = None) -> CodeTask:
        """The generated contents for ``env``; to show your own texts instead, :func:`dataclasses.replace` the fields.

        :param env: A gymnasium env; its spec gives the id (the title) and the time limit.
        :param horizon: The episode length (``None``: the spec's ``max_episode_steps``).
        :raises ValueError: when neither gives the episode length.
        """
        env_id = None if env.spec is None else env.spec.id
        horizon = horizon or (None if env.spec is None else env.spec.max_episode_steps)
        if horizon is None:
            raise ValueError("the env has no time limit: pass horizon")
        observation, implementation = describe_spaces(env_id, env.observation_space, env.action_space, horizon)
        source = reward_source(env)
        task = describe_task(env_id, env.observation_space, env.action_space)
        reward = task.reward if source is None else f"{FENCE}\n{source.strip()}\n```"
        kind = "an integer" if isinstance(env.observation_space, spaces.Discrete) else "a numpy array"
        return cls(env_title(env_id or type(env.unwrapped).__name__), observation, implementation, reward, horizon, kind)

    @property
    def policy_class(self) -> str:
        return f"{self.title}Policy"

    @property
    def reward_name(self) -> str:
        return f"{self.title}RewardFunction"

    def _render(self, name: str, **values: Any) -> str:
        return template_environment().get_template(f"promptpo_{name}.j2").render(task=self, **values).strip() + "\n"

    def policy(self) -> str:
        """The first round's prompt: the contexts, the starter code, the request."""
        return self._render("policy")

    def refine(self, history: Sequence[Attempt]) -> str:
        """A later round's prompt: the first round's, the latest reflection, every entry (the best hinted), the request.

        :param history: The kept policy of every round so far, oldest first.
        """
        attempts = _attempts(history)
        reflection, attempts[-1]["reflection"] = attempts[-1]["reflection"], ""
        return self._render("refine", attempts=attempts, reflection=reflection)

    def repair(self, source: str, traceback: str) -> str:
        """The prompt after the candidate ``source`` crashed with ``traceback`` (shortened)."""
        return self._render("repair", source=source.strip(), traceback=shorten_traceback(traceback))

    def feedback(self) -> str:
        """The prompt for the Feedback class that summarises an episode."""
        return self._render("feedback")

    def feedback_repair(self, source: str, traceback: str) -> str:
        """The prompt after the Feedback class ``source`` crashed with ``traceback`` (shortened)."""
        return self._render("feedback_repair", source=source.strip(), traceback=shorten_traceback(traceback))

    def reflection(self, history: Sequence[Attempt]) -> str:
        """The reflection prompt: the latest entry of ``history`` (oldest first) against the earlier entries' returns."""
        attempts = _attempts(history)
        return self._render("reflection", latest=attempts[-1], earlier=attempts[:-1])
