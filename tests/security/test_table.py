"""The red-team table of ``tests/security/README.md`` is the variants ``test_red_team`` runs, row for row."""

from __future__ import annotations

from pathlib import Path

from tests.security.variants import table, variants


def test_the_table_of_the_readme_is_what_the_variants_hold() -> None:
    readme = (Path(__file__).parent / "README.md").read_text()
    assert table() in readme, "tests/security/README.md: paste the table `variants.table()` renders"
    assert len(variants()) >= 11 and len({v.key for v in variants()}) == len(variants())
