"""What a run teaches and how lessons are judged: pure functions over one normalised view of a run.

An adapter reads an agent type's recorded steps into the view (``adapters``, ``view``). From the view come the
evidence the distiller is shown (``evidence``, ``transcript``) and the facts kept without an LLM: observed fixes
(``fixes``, with ``fixtext``), the shapes of tool results (``shapes``), the code of a run that ended well
(``recipes``, with ``trim`` and ``answers``), its parameters found by where the task's values flow (``params``)
and what a lesson of one task means for another (``adapt``). Then the distill prompt and the reading of its reply
(``distill``, ``decide``), the quality gate and quarantine (``gate``), consolidation decisions (``consolidate``),
credit and verdict rules (``credit``, ``verdicts``), the tools a lesson needs (``needs``) and a run's tool
statistics (``usage``). ``render`` is the one renderer of lesson payloads to text, ``walk`` the one walker of
result structures, ``code`` the one normaliser of code; ``upgrade`` completes a lesson of an earlier schema.

No Redis, no Celery, no store, no network here (an import contract says so): the worker reads and writes around
these functions, and the agent side imports them to build its instructions.
"""
