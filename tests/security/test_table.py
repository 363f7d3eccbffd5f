"""The red-team tables of ``tests/security/README.md`` are the variants and the poisoned errors ``test_red_team``
runs, row for row."""

from __future__ import annotations

from pathlib import Path

from tests.security.test_red_team import POISONED_ERRORS
from tests.security.variants import table, variants


def test_the_table_of_the_readme_is_what_the_variants_hold() -> None:
    readme = (Path(__file__).parent / "README.md").read_text()
    assert table() in readme, "tests/security/README.md: paste the table `variants.table()` renders"
    assert len(variants()) >= 11 and len({v.key for v in variants()}) == len(variants())


def test_the_table_of_poisoned_errors_has_a_row_for_each_error_test_red_team_runs() -> None:
    readme = (Path(__file__).parent / "README.md").read_text()
    for message, _, _ in POISONED_ERRORS.values():
        said = message.split("{region!r}", 1)[1].lstrip(":. ")
        assert f"| `{said}` | nothing | the failed call |" in readme, f"tests/security/README.md: no row for {said!r}"
