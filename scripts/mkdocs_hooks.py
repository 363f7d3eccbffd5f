"""MkDocs hooks: pages generated from the code, so the docs cannot drift from it.

``<!-- settings-table -->`` in a page becomes the table of every setting: its variable, default and the
description ``lessonbank.Settings`` declares.
"""

from __future__ import annotations

from typing import Any

PLACEHOLDER = "<!-- settings-table -->"


def settings_table() -> str:
    """A Markdown table of every setting: variable, default, description."""
    from pydantic_core import PydanticUndefined

    from lessonbank.core.settings import Settings

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        variable = alias.choices[0] if alias is not None else f"LESSONBANK_{name.upper()}"  # type: ignore[union-attr]
        if field.default_factory is not None:
            default = {"data_dir": "`~/.local/share/lessonbank`", "redact_patterns": "`[]`"}.get(name, "computed")
        elif field.default is None or field.default is PydanticUndefined:
            default = "unset"
        else:
            default = f"`{field.default}`"
        meaning = (field.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{variable}` | {default} | {meaning} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(PLACEHOLDER, settings_table()) if PLACEHOLDER in markdown else markdown
