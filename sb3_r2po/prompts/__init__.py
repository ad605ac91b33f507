"""Prompts: Jinja2 templates (``templates/*.j2``), the task descriptions they show and named prompt settings."""

from sb3_r2po.prompts.presets import PROMPT_PRESETS, prompt_preset
from sb3_r2po.prompts.tasks import TASK_DESCRIPTIONS, TaskDescription, describe_task, register_task_description

__all__ = [
    "PROMPT_PRESETS",
    "TASK_DESCRIPTIONS",
    "TaskDescription",
    "describe_task",
    "prompt_preset",
    "register_task_description",
]
