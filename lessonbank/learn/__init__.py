"""What a run teaches and how lessons are judged: pure functions over one normalised view of a run.

An adapter reads an agent type's recorded steps into the view (``adapters``, ``view``); from it come the
evidence the distiller is shown (``evidence``, ``transcript``), the facts kept without an LLM (observed fixes:
``fixes``; the shapes of tool results: ``shapes``; the code of a run that ended well: ``recipes``), the distill
prompt and the reading of its reply (``distill``, ``decide``), the quality gate and quarantine (``gate``), the
consolidation decisions (``consolidate``), credit rules (``credit``) and verdict rules (``verdicts``), the tools a
lesson needs (``needs``) and a run's tool statistics (``usage``). No Redis, no Celery, no store, no network here
(an import contract says so): the worker reads and writes around these functions, and the agent side imports
them to build its instructions.
"""
