"""sb3_r2po: R2PO (Reflective Prompted Policy Optimization) for Stable-Baselines3."""

import sb3_r2po.envs  # noqa: F401  (registers the custom envs and the task descriptions)
from sb3_r2po.llm import ChatBackend, ChatReply, ExampleLLM, make_backend
from sb3_r2po.r2po import R2PO, LinearPolicy, ProjectedMlpPolicy, RandomFeaturesPolicy, TabularPolicy

__version__ = "0.1.0"

__all__ = ["R2PO", "ChatBackend", "ChatReply", "ExampleLLM", "LinearPolicy", "ProjectedMlpPolicy", "RandomFeaturesPolicy"]
__all__ += ["TabularPolicy", "__version__", "make_backend"]
