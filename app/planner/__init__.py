"""trainplan's planner: specs in, ranked parallel plans out. Imports no web framework."""

__version__ = "0.1.0"

from app.planner.api import estimate, plan
from app.planner.results import Estimate, Plan, PlanResult
from app.planner.specs import (
    ClusterSpec,
    EstimateRequest,
    ModelSpec,
    ParallelConfig,
    PlanRequest,
    TrainingSpec,
)

__all__ = [
    "ClusterSpec",
    "Estimate",
    "EstimateRequest",
    "ModelSpec",
    "ParallelConfig",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "TrainingSpec",
    "__version__",
    "estimate",
    "plan",
]
