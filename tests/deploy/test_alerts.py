"""``deploy/prometheus/alerts.yml``: a Prometheus rules file whose expressions parse (a real PromQL parser) and
name only metrics the worker serves."""

from __future__ import annotations

import re
from typing import Any

import promql_parser
import yaml

from lessonbank.workers.observe.counters import Metrics
from lessonbank.workers.observe.gauges import HELP
from tests.fixtures.celery_worker import REPO

RULES = REPO / "deploy" / "prometheus" / "alerts.yml"


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def served() -> set[str]:
    """Every metric name a worker's /metrics carries: its counters and histograms, and the cluster's gauges."""
    names = {sample.name for family in Metrics().registry.collect() for sample in family.samples}
    names |= {f"{family.name}_total" for family in Metrics().registry.collect() if family.type == "counter"}
    return names | set(HELP) | {"lessonbank_redis_up"}


def test_the_rules_cover_the_four_failures_an_operator_must_hear_of() -> None:
    assert {rule["alert"] for rule in rules()} >= {"LessonbankNoLiveWorker", "LessonbankQueueStuck",
                                                    "LessonbankDeadLettersRising", "LessonbankLlmFailing"}


def test_every_expression_parses_and_names_only_served_metrics() -> None:
    known = served()
    for rule in rules():
        promql_parser.parse(rule["expr"])  # raises ValueError on a malformed expression
        used = set(re.findall(r"\blessonbank_[a-z_]+", rule["expr"]))
        assert used and used <= known, (rule["alert"], used - known)
        assert rule["labels"]["severity"] in {"critical", "warning"} and rule["annotations"]["summary"]


def test_a_malformed_expression_is_caught() -> None:
    try:
        promql_parser.parse("max(lessonbank_workers_alive < 1")
    except ValueError:
        return
    raise AssertionError("the parser accepted an unclosed parenthesis")
