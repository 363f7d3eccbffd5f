"""The architecture page lists the package's folders as they are, each with what it owns."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"


def folder_tree(package: Path, depth: int = 2) -> list[str]:
    """The package's folders drawn as ``tree -d -L 2`` draws them (packages only, sorted)."""
    lines = [package.name]

    def draw(folder: Path, prefix: str, level: int) -> None:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists())
        for index, child in enumerate(children):
            last = index == len(children) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{child.name}")
            if level < depth:
                draw(child, prefix + ("    " if last else "│   "), level + 1)

    draw(package, "", 1)
    return lines


def page_tree() -> list[tuple[str, str]]:
    """(drawn folder, what it owns) of each line of the page's tree block."""
    text = PAGE.read_text()
    block = text.split("```\n", 2)[1].split("```", 1)[0]
    rows = []
    for line in block.splitlines():
        found = re.fullmatch(r"([│├└─ ]*\w+) {2,}(.+)", line)
        assert found, f"not a folder and what it owns: {line!r}"
        rows.append((found[1], found[2]))
    return rows


def test_the_architecture_page_lists_every_folder_and_what_it_owns() -> None:
    rows = page_tree()
    assert [drawn for drawn, _ in rows] == folder_tree(ROOT / "lessonbank")
    assert all(len(owns) > 20 for _, owns in rows), rows
