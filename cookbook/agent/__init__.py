"""The SWE agent: tools, tool-call parsing, budgets, a token-exact agent loop, trajectories."""

from .agent import Policy, SampleOut, SWEAgent
from .budgets import Budgets
from .parser import ToolCall, parse_tool_calls
from .tools import TOOLS, ToolBox
from .trajectory import Segment, Trajectory, Turn

__all__ = ["Budgets", "ToolCall", "parse_tool_calls", "TOOLS", "ToolBox", "Segment", "Trajectory", "Turn", "SWEAgent",
           "Policy", "SampleOut"]
