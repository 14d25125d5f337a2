"""The SWE agent: tools, budgets, a token-exact agent loop, trajectories (the chat format and tool-call
parsing: services/common/renderers)."""

from .agent import Policy, SampleOut, SWEAgent
from .budgets import Budgets
from .tools import TOOLS, ToolBox
from .trajectory import Segment, Trajectory, Turn

__all__ = ["Budgets", "TOOLS", "ToolBox", "Segment", "Trajectory", "Turn", "SWEAgent",
           "Policy", "SampleOut"]
