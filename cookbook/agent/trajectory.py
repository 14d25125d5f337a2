"""The agent's rollout record: the shared types of services/common/trajectory.py (the ModelService records the
same), under the name the recipes import them by."""

from services.common.trajectory import SAMPLED, SampleOut, Segment, Trajectory, Turn

__all__ = ["SAMPLED", "SampleOut", "Segment", "Trajectory", "Turn"]
