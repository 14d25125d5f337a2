"""The SWE agent: tools, budgets, a token-exact agent loop, trajectories (the chat format and tool-call
parsing: services/common/renderers)."""

from services.common.budgets import Budgets
from services.common.trajectory import Segment, Trajectory, Turn

from .agent import Policy, SampleOut, SWEAgent
from .tools import TOOLS, ToolBox

__all__ = ["Budgets", "TOOLS", "ToolBox", "Segment", "Trajectory", "Turn", "SWEAgent",
           "Policy", "SampleOut"]
