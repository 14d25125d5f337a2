"""The SWE agent: tools, tool-call parsing, budgets, a token-exact agent loop, trajectories."""

from .budgets import Budgets
from .parser import ToolCall, parse_tool_calls
from .tools import TOOLS, ToolBox
from .trajectory import Segment, Trajectory, Turn
from .agent import SWEAgent, Policy, SampleOut

__all__ = ["Budgets", "ToolCall", "parse_tool_calls", "TOOLS", "ToolBox", "Segment", "Trajectory", "Turn", "SWEAgent",
           "Policy", "SampleOut"]
