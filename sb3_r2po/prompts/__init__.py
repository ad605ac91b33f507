"""Prompts: Jinja2 templates (``templates/*.j2``) and the task descriptions they show."""

from sb3_r2po.prompts.tasks import TASK_DESCRIPTIONS, TaskDescription, describe_task, register_task_description

__all__ = ["TASK_DESCRIPTIONS", "TaskDescription", "describe_task", "register_task_description"]
