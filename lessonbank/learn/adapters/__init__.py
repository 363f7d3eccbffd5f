"""Adapters: an agent type's recorded steps read into the one normalised view (``lessonbank.learn.view``).

``read_run`` reads smolagents' step records (``codeagent``: a CodeAgent on the local executor, and a
ToolCallingAgent's tool calls), the only agent type recorded today.
"""

from lessonbank.learn.adapters.codeagent import read_run

__all__ = ["read_run"]
