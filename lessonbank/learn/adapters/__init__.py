"""Adapters: an agent type's recorded steps read into the one normalised view (``lessonbank.learn.view``).

``read_run`` reads a run's records, each step through the adapter of what made it: a CodeAgent on the local
executor (``codeagent``) or on a remote one that reports a traceback (``remote``), a ToolCallingAgent
(``toolcalling``); a managed agent's run carries its manager's run id. ``calls`` reads the calls a piece of
code makes.
"""

from lessonbank.learn.adapters.read import read_run

__all__ = ["read_run"]
