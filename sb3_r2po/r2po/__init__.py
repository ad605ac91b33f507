from sb3_r2po.r2po.arguments import R2POSettings
from sb3_r2po.r2po.policies import (
    CompactPolicy,
    LinearPolicy,
    MlpLinear,
    ProjectedMlp,
    ProjectedMlpPolicy,
    RandomFeatures,
    RandomFeaturesPolicy,
    Tabular,
    TabularPolicy,
)
from sb3_r2po.r2po.r2po import R2PO

__all__ = ["R2PO", "CompactPolicy", "LinearPolicy", "MlpLinear", "ProjectedMlp", "ProjectedMlpPolicy", "R2POSettings"]
__all__ += ["RandomFeatures", "RandomFeaturesPolicy", "Tabular", "TabularPolicy"]
