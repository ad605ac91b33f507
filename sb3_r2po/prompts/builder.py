"""Render the Search, Critic and retry prompts, one user message each as in the reference, from the Jinja2 templates
in ``templates/`` (each names the reference template it follows). Values are inserted as data: Jinja2 never evaluates
template syntax inside a value, so neither an env description nor an LLM reply can inject template code.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import jinja2

from sb3_r2po.common.parameters import REPLY_STYLES, ParameterSpace, ReplyStyle
from sb3_r2po.common.rollouts import EvidencePackage, digits_apart, reference_number, sig
from sb3_r2po.llm.base import Message
from sb3_r2po.prompts.tasks import TaskDescription

TRAJECTORY_TITLES = {
    "median": "Median episode (the one whose reward is closest to the median reward)",
    "mean": "Representative episode (the one whose reward is closest to the mean reward)",
    "worst": "Worst episode (the lowest reward)",
    "best": "Best episode (the highest reward)",
}

SEARCH_TEMPLATES = {name: f"search_{name}.j2" for name in ("r2po", "props", "props_plus")}
"""The Search template of each :data:`~sb3_r2po.r2po.arguments.SearchPrompt`."""
CRITIC_TEMPLATES = {"critic_only": "critic_only.j2"} | {p: f"critic_{p}.j2" for p in ("r2po", "rep_traj", "three_traj")}
"""The Critic template of each :data:`~sb3_r2po.r2po.arguments.CriticPrompt`."""

PromptLayout = Literal["reference", "compact"]
"""How prompts write their data: ``reference``, the reference's formats; ``compact``, ours (vectors in the reply
style, 4 significant figures, one line per step)."""

PROMPT_LAYOUTS: tuple[PromptLayout, ...] = ("reference", "compact")


@dataclass(frozen=True)
class HistoryLine:
    """One history entry as shown in a prompt.

    :param params: The vector, formatted.
    :param mean_return: Its mean return (a warm-up entry: its one episode's return).
    :param n_episodes: The episodes behind ``mean_return``.
    :param warmup: A warm-up candidate (random, one episode).
    :param excerpt: A one-line excerpt of its representative episode.
    :param trajectory: Its first evaluation episode, one line per step (ProPS+ on tabular tasks).
    :param index: Its position in the whole history, from 0.
    :param values: The vector's values.
    """

    params: str
    mean_return: float
    n_episodes: int
    warmup: bool = False
    excerpt: str | None = None
    trajectory: tuple[str, ...] | None = None
    index: int = 0
    values: tuple[float, ...] = ()


def history_summary(
    history: tuple[HistoryLine, ...], best: float | None, best_episodes: int = 0, best_warmup: bool = False
) -> dict[str, Any]:
    """What the prompts say about the history beyond its lines: ``warmup_lines`` (a flag per line), ``warmup_shown``,
    ``best``, ``best_episodes`` (0: unknown) and ``best_of_warmup``. While only warm-up candidates exist, the best is one
    episode's return (``best``; ``best_warmup``: it is a warm-up candidate's); once a K-episode line is shown, the larger
    of ``best`` and every shown non-warm-up mean over as many episodes (``best_episodes``; 0: the most of any line)."""
    warmup = tuple(line.warmup for line in history)
    scored = [line for line in history if not line.warmup]
    summary = {"warmup_lines": warmup, "warmup_shown": any(warmup), "best": best, "best_episodes": 0, "best_of_warmup": False}
    if best is None:
        return summary
    if not scored and (best_warmup or not best_episodes):
        summary["best_of_warmup"] = True
        return summary
    n = best_episodes if best_episodes and not best_warmup else max(line.n_episodes for line in scored)
    same = [line.mean_return for line in scored if line.n_episodes == n]
    summary.update(best=max(same + ([] if best_warmup else [best])), best_episodes=n)
    return summary


@dataclass(frozen=True)
class PromptContext:
    """What every prompt shows.

    :param task: The task description (``None``: no task section).
    :param layout: Lines describing how the flat parameters map onto the policy.
    :param space: The parameter space.
    :param target: Target mean return (``None``: not shown).
    :param history: The history, oldest first.
    :param iteration: The current iteration (1-based).
    :param total_iterations: The planned number of iterations, when known.
    :param step_size: The suggested step size per parameter.
    :param best: Best mean return so far (R2PO: the best K-episode mean; see :func:`history_summary`).
    :param best_episodes: Episodes behind ``best`` (0: unknown).
    :param best_warmup: Whether ``best`` is a warm-up candidate's return (one episode).
    :param extra: Further template values (they override the ones above of the same name).
    :param search_sees_task: Ours: the black-box Search prompts also show the task and the policy layout.
    :param selection_hints: Ours: the Critic is told what the selection does with its revision.
    :param extra_statistics: Ours: episode counts, the best value so far, the standard deviation and the endings.
    :param keep_best: Whether the revision must match the proposal to be kept (``selection_hints`` says so).
    :param history_omitted: History entries the compressed history leaves out.
    :param reuse_order: Ours: prompts ordered for prefix reuse (what stays the same first, the proposal last).
    :param prompt_layout: How the data is written (:data:`PromptLayout`).
    """

    task: TaskDescription | None
    layout: tuple[str, ...]
    space: ParameterSpace
    target: float | None
    history: tuple[HistoryLine, ...]
    iteration: int
    total_iterations: int | None
    step_size: float
    best: float | None = None
    best_episodes: int = 0
    best_warmup: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    search_sees_task: bool = False
    selection_hints: bool = False
    extra_statistics: bool = False
    keep_best: bool = True
    history_omitted: int = 0
    reuse_order: bool = False
    prompt_layout: PromptLayout = "reference"


@functools.lru_cache(maxsize=16)
def template_environment(template_dir: str | None = None) -> jinja2.Environment:
    """The Jinja2 environment of the packaged templates, or of the absolute ``template_dir`` (reloaded when a file
    changes); one per directory in a process."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("sb3_r2po", "prompts/templates")
        if template_dir is None
        else jinja2.FileSystemLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,  # an included partial ends with its newline
        auto_reload=template_dir is not None,
    )
    env.filters["sig"] = lambda x, digits=3: sig(float(x), digits)
    env.filters["digits_apart"] = lambda x, other, digits=4: digits_apart(
        float(x), None if other is None else float(other), digits
    )
    env.filters["fixed"] = lambda x, digits=2: f"{float(x):.{digits}f}"
    env.filters["inline"] = lambda values, sep=",": "[" + sep.join(reference_number(v) for v in values) + "]"
    env.filters["semicolons"] = lambda values: "; ".join(f"params[{i}]: {reference_number(v)}" for i, v in enumerate(values))
    env.filters["f_params"] = lambda values: "".join(f"params[{i}]: {float(v):.5g}; " for i, v in enumerate(values))
    return env


class PromptBuilder:
    """Renders chat messages from the package's templates.

    :param template_dir: A directory of Jinja2 templates replacing the packaged ones.
    :param reply_style: The vector format the reply-format line asks for (:data:`~sb3_r2po.common.parameters.ReplyStyle`).
    """

    def __init__(self, template_dir: str | None = None, reply_style: ReplyStyle = "indexed") -> None:
        if reply_style not in REPLY_STYLES:
            raise ValueError(f"reply_style must be one of {REPLY_STYLES}, got {reply_style!r}")
        self.reply_style: ReplyStyle = reply_style
        self.template_dir = None if template_dir is None else os.path.abspath(template_dir)

    @property
    def env(self) -> jinja2.Environment:
        """The Jinja2 environment of the templates (not held, so a builder pickles)."""
        return template_environment(self.template_dir)

    def _render(self, name: str, **values: Any) -> str:
        text = self.env.get_template(name).render(**values)
        while "\n\n\n" in text:  # a section left out leaves one blank line, not two (as re.sub(r"\n{3,}", "\n\n"))
            text = text.replace("\n\n\n", "\n\n")
        return text.strip() + "\n"

    def _example(self, space: ParameterSpace) -> str:
        """The reply-format line: every value for up to 3 parameters, else the first two, an ellipsis and the last."""
        shown = list(range(space.size)) if space.size <= 3 else [0, 1, None, space.size - 1]
        if self.reply_style == "list":
            return "params: [" + ", ".join("..." if i is None else "<value>" for i in shown) + "]"
        return ", ".join("..." if i is None else f"params[{i}]: <value>" for i in shown)

    def _common(self, ctx: PromptContext) -> dict[str, Any]:
        values = {f.name: getattr(ctx, f.name) for f in fields(ctx) if f.name != "extra"}
        summary = history_summary(ctx.history, ctx.best, ctx.best_episodes, ctx.best_warmup)
        defaults = {"example": self._example(ctx.space), "trajectory_titles": TRAJECTORY_TITLES}
        return {**values, **summary, **defaults, **ctx.extra}

    def search(self, ctx: PromptContext, prompt: str = "r2po", history: str = "r2po") -> list[Message]:
        """The Search-LLM's message: propose a new vector from the history.

        :param ctx: What the prompt shows.
        :param prompt: The template: ``"r2po"``, ``"props"`` or ``"props_plus"`` (:data:`SEARCH_TEMPLATES`).
        :param history: How the history is written (:data:`~sb3_r2po.r2po.arguments.HistoryStyle`).
        """
        text = self._render(SEARCH_TEMPLATES[prompt], history_style=history, critic=False, **self._common(ctx))
        return [{"role": "user", "content": text}]

    def critic(
        self,
        ctx: PromptContext,
        candidate: HistoryLine,
        evidence: EvidencePackage,
        prompt: str = "r2po",
        history: str = "r2po",
    ) -> list[Message]:
        """The Critic-LLM's message: revise ``candidate`` given its evidence package.

        :param ctx: What the prompt shows.
        :param candidate: The proposal under review (``critic_only`` shows none: its evidence is the latest episode).
        :param evidence: The evidence package.
        :param prompt: The template: ``"r2po"``, ``"rep_traj"``, ``"three_traj"`` or ``"critic_only"``
            (:data:`CRITIC_TEMPLATES`).
        :param history: How the history is written (:data:`~sb3_r2po.r2po.arguments.HistoryStyle`).
        """
        values = dict(candidate=candidate, evidence=evidence, history_style=history, critic=True, **self._common(ctx))
        return [{"role": "user", "content": self._render(CRITIC_TEMPLATES[prompt], **values)}]

    def retry(self, reason: str, space: ParameterSpace) -> Message:
        """The follow-up message after an unusable reply, stating what was wrong."""
        return {"role": "user", "content": self._render("retry.j2", reason=reason, space=space, example=self._example(space))}
