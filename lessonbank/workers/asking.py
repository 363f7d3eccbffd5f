"""The LLM calls of a distillation: the run's lessons (one completion, plus one repair if nothing usable came
back) and the consolidation decision. ``lessonbank.learn`` writes the questions and reads the answers."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.learn import decide
from lessonbank.learn.distill import DistillOutput, DistillReply, DistillSchema, DraftLesson, build_messages, unusable
from lessonbank.learn.distill import validate as validate_reply
from lessonbank.learn.evidence import Evidence
from lessonbank.workers.llm import ChatLLM, ChatReply, InvalidOutput, structured

logger = logging.getLogger(__name__)


@dataclass
class DistillResult:
    output: DistillOutput
    replies: list[ChatReply] = field(default_factory=list)

    @property
    def latency(self) -> float:
        return sum(r.latency for r in self.replies)

    @property
    def tokens(self) -> tuple[int, int]:
        return sum(r.prompt_tokens for r in self.replies), sum(r.completion_tokens for r in self.replies)


def distill(llm: ChatLLM, task: str, evidence: list[Evidence], transcript: str, max_lessons: int,
            verdict: str = "unknown", source: str = "none", redactor: Redactor | None = None) -> DistillResult:
    """Lessons from one run: one completion (plus one repair if nothing usable came back); with a ``redactor``,
    the lessons of the reply dropped are logged at DEBUG (``validate``).

    Raises TransientDistillError (retry), UnusableOutput (nothing usable after the repair) or
    PermanentDistillError (the request refused).
    """
    messages = build_messages(task, evidence, transcript, max_lessons, verdict, source)

    def usable(reply: DistillReply) -> None:
        problem = unusable(reply, evidence)
        if problem:
            raise InvalidOutput(problem)

    reply, replies = structured(llm, messages, "run_lessons", DistillReply, schema_model=DistillSchema, check=usable)
    return DistillResult(output=validate_reply(reply, evidence, max_lessons, redactor), replies=replies)


def llm_decider(llm: ChatLLM) -> decide.Decider:
    """A Decider that asks `llm` once for all related new lessons of a run."""

    def ask(drafts: list[DraftLesson], existing: list[Lesson]) -> list[decide.Decision]:
        result, replies = structured(llm, decide.messages(drafts, existing), "lesson_decisions", decide.Decisions)
        logger.info(
            "consolidation decision: %d new vs %d existing lessons, %.2fs, %d+%d tokens",
            len(drafts), len(existing), sum(r.latency for r in replies),
            sum(r.prompt_tokens for r in replies), sum(r.completion_tokens for r in replies),
        )
        return result.decisions

    return ask
