"""The report: interval estimates against published values, the document's comparisons, the page's
escaping, plots that show data, and tables only when matplotlib is missing."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from lessonbank.core.models import Lesson, Recipe, RunSummary, ToolStats
from lessonbank.learn.stats import mean, mean_difference, newcombe, t_value, wilson
from lessonbank.report import build_report, render_html, render_plots, render_text, report_tables
from lessonbank.report.tables import lessons_table

NOW = 1_700_000_000.0


def close(pair: tuple[float | None, float | None], expected: tuple[float, float], places: int = 4) -> bool:
    return all(value is not None and round(value, places) == e for value, e in zip(pair, expected, strict=True))


def test_wilson_matches_newcombe_1998() -> None:
    assert close((wilson(81, 263).low, wilson(81, 263).high), (0.2553, 0.3662))
    assert close((wilson(15, 148).low, wilson(15, 148).high), (0.0624, 0.1605))
    assert (wilson(0, 10).low, round(wilson(0, 10).high or 0, 4)) == (0.0, 0.2775)
    assert (round(wilson(10, 10).low or 0, 4), wilson(10, 10).high) == (0.7225, 1.0)
    assert wilson(0, 0).estimate is None
    with pytest.raises(ValueError):
        wilson(3, 2)


@pytest.mark.parametrize(
    ("counts", "expected"),
    [  # Newcombe (1998), Statistics in Medicine 17:873-890, table II, method 10
        ((56, 70, 48, 80), (0.0524, 0.3339)),
        ((9, 10, 3, 10), (0.1705, 0.8090)),
        ((5, 56, 0, 29), (-0.0381, 0.1926)),
        ((0, 10, 0, 20), (-0.1611, 0.2775)),
        ((0, 10, 0, 10), (-0.2775, 0.2775)),
        ((10, 10, 0, 20), (0.6791, 1.0)),
        ((10, 10, 0, 10), (0.6075, 1.0)),
    ],
)
def test_newcombe_matches_newcombe_1998(counts: tuple[int, int, int, int], expected: tuple[float, float]) -> None:
    estimate = newcombe(*counts)
    assert close((estimate.low, estimate.high), expected)
    assert estimate.estimate == pytest.approx(counts[0] / counts[1] - counts[2] / counts[3])


@pytest.mark.parametrize(("df", "quantile"), [  # two-sided 95 %, any table of Student's t
    (1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (120, 1.9799), (math.inf, 1.9600)])
def test_t_value_matches_the_table(df: float, quantile: float) -> None:
    assert round(t_value(df), 4) == quantile


def test_t_value_for_fractional_degrees_of_freedom_matches_the_density_integrated() -> None:
    """Welch's degrees of freedom are fractional: the quantile found must leave 2.5 % in the tail of the density
    integrated directly (Simpson's rule), a computation independent of the incomplete beta function."""
    df = 4.4117647
    q = t_value(df)
    density = lambda t: math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) \
        * (1 + t * t / df) ** (-(df + 1) / 2)  # noqa: E731
    n, h = 20_000, q / 20_000
    area = h / 3 * sum(density(i * h) * (1 if i in (0, n) else 4 if i % 2 else 2) for i in range(n + 1))
    assert area == pytest.approx(0.475, abs=1e-7)


def test_means_and_their_difference() -> None:
    d = mean_difference([1, 2, 3, 4], [2, 4, 6, 8])  # Welch SE sqrt(1.667/4 + 6.667/4) = 1.4434, df 4.41
    assert d.estimate == -2.5 and close((d.low, d.high), (-6.3642, 1.3642))  # t(4.41) = 2.677
    assert d.negated().to_dict() == {"estimate": 2.5, "low": -d.high, "high": -d.low}  # type: ignore[operator]
    m = mean([2.0, 4.0, 6.0])  # 4 ± t(2) 4.3027 x 2/sqrt(3)
    assert m.estimate == 4.0 and close((m.low, m.high), (-0.9683, 8.9683))
    assert mean([5.0]).low is None and mean_difference([1.0], [2.0, 3.0]).estimate == -1.5
    same = mean_difference([3.0, 3.0], [5.0, 5.0, 5.0])  # no spread at all: the interval is the difference
    assert (same.estimate, same.low, same.high) == (-2.0, -2.0, -2.0)


def runs(arm: str, verdicts: str, tokens: int, start: float) -> list[RunSummary]:
    """One run per letter: s(uccess), f(ailure), u(nknown)."""
    names = {"s": "success", "f": "failure", "u": "unknown"}
    return [
        RunSummary(run_id=f"{arm}{i}", bank="b", arm=arm, verdict=names[v], started_at=start + 60 * i,  # type: ignore[arg-type]
                   steps=3, input_tokens=tokens, output_tokens=tokens // 10, wall_s=12.0, errors=i % 2,
                   tools={"search": ToolStats(calls=2, errors=i % 2, seconds=[0.4],
                                              error_messages=["KeyError: <str>"] if i % 2 else [])})
        for i, v in enumerate(verdicts)
    ]


def lessons() -> list[Lesson]:
    found = [Lesson.new("b", "fact", "CSV files use ';' as separator"),
             Lesson.new("b", "failure", "<script>alert('x')</script> & never call the v1 API"),
             Lesson.new("b", "approach", "Page through the orders API with ?page=N")]
    for i, lesson in enumerate(found):
        lesson.first_seen = NOW - 3000 + 600 * i
    found[2].status, found[2].status_changed_at = "retired", NOW - 600
    found[0].given, found[0].applied, found[0].helpful = 6, 4, 3
    return found


def test_report_compares_arms_with_intervals() -> None:
    summaries = runs("lessons", "sssssssffu", 1000, NOW - 3600) + runs("control", "sssssffffu", 1500, NOW - 3500)
    document = build_report("b", summaries, lessons(), now=NOW, window=4)
    arms = document["arms"]
    assert document["comparison"] == "arms" and document["runs"] == 20
    assert (arms["lessons"]["runs"], arms["lessons"]["with_verdict"], arms["lessons"]["unknown_verdict"]) == (10, 9, 1)
    assert arms["lessons"]["success_rate"] == pytest.approx(7 / 9)
    assert arms["control"]["success_rate"] == pytest.approx(5 / 9)
    assert arms["lessons"]["mean_tokens"] == 1100 and arms["control"]["mean_tokens"] == 1650
    assert document["difference"]["success_rate"]["estimate"] == pytest.approx(2 / 9)
    assert document["difference"]["tokens_saved_per_run"]["estimate"] == 550
    assert document["tools"][0] == {"name": "search", "runs": 20, "calls": 40, "errors": 10, "error_rate": 0.25,
                                    "p50_s": 0.4, "top_errors": [{"message": "KeyError: <str>", "count": 10}]}
    assert document["lesson_counts"]["by_status"]["retired"] == 1
    assert [row["given"] for row in document["lessons"]][0] == 6  # active and most given first
    last = document["series"]["lessons"][-1]
    assert last["by_status"]["active"] == 2 and last["by_status"]["retired"] == 1
    rolling = document["series"]["runs"]["lessons"]
    assert len(rolling) == 10 and rolling[-1]["success_rate"] == pytest.approx(1 / 3)  # s f f u: 1 of 3 known
    json.dumps(document)  # JSON-ready


def test_without_control_it_compares_early_and_late_thirds() -> None:
    document = build_report("b", runs("lessons", "ffffssssss", 1000, NOW - 3600), [], now=NOW)
    assert document["comparison"] == "early_late" and document["difference"] is None
    assert "can only compare early and late runs" in document["note"]
    early_late = document["early_late"]
    assert (early_late["early"]["runs"], early_late["late"]["runs"]) == (3, 3)
    assert early_late["early"]["success_rate"] == 0.0 and early_late["late"]["success_rate"] == 1.0
    assert early_late["difference"]["success_rate"]["estimate"] == 1.0
    assert document["arms"]["control"]["runs"] == 0 and document["arms"]["control"]["success_rate"] is None
    text = render_text(report_tables(document), "header", width=140)
    assert "early third" in text and "can only compare early and late runs" in text


def test_with_fewer_than_three_runs_the_table_shows_what_they_did_and_why_the_thirds_are_empty() -> None:
    document = build_report("b", runs("lessons", "fs", 1000, NOW - 3600), [], now=NOW)
    assert document["early_late"]["difference"] is None
    table = report_tables(document)[0]
    assert table.headers[1:4] == ["all runs given lessons", "early third", "late third"]
    assert table.rows[0][1:4] == ["2", "0", "0"]
    assert table.rows[2][1].startswith("50.0 %")  # one success of the two runs, not an empty cell
    assert "2 runs given lessons so far: the thirds stay empty until there are 3." in table.note
    text = render_text(report_tables(document), "header", width=160)
    assert "the thirds stay empty" in text and "No control runs" in text


def pixels_vary(png: bytes) -> bool:
    image = Image.open(io.BytesIO(png)).convert("L")
    return image.size[0] > 100 and image.size[1] > 100 and max(ImageStat.Stat(image).var) > 100


def test_plots_show_data_and_the_page_escapes_untrusted_text() -> None:
    summaries = runs("lessons", "sfsssfsss", 900, NOW - 3600) + runs("control", "sffsfsfsf", 1400, NOW - 3500)
    document = build_report("<b>ank", summaries, lessons(), now=NOW)
    plots = render_plots(document)
    assert plots is not None and set(plots) == {"success_rate", "tokens", "lessons", "tool_errors"}
    assert all(pixels_vary(png) for png in plots.values())
    page = render_html(document, report_tables(document), plots)
    assert "<script" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; never" in page
    assert "bank &lt;b&gt;ank" in page and "<b>ank" not in page
    assert page.count('src="data:image/png;base64,') == 4
    empty = render_plots(build_report("b", [], [], now=NOW))
    assert empty == {}


def test_text_tables_print_markup_and_control_characters_literally() -> None:
    summaries = runs("lessons", "ss", 100, NOW - 100)
    found = [Lesson.new("b", "fact", "[bold red]not markup[/] \x1b[31mred\x1b[0m")]
    text = render_text(report_tables(build_report("b", summaries, found, now=NOW)), "h", width=200)
    assert "[bold red]not markup[/]" in text and "\x1b" not in text


def test_the_lessons_table_marks_what_was_kept_from_code() -> None:
    found = [Lesson.new("b", "fact", "`x = f(d='2024-01-02')` failed with ValueError; the corrected line "
                                     "`x = f(d='02.01.2024')` worked.", origin="observed"),
             Lesson.new("b", "fact", "CSV files use ';' as separator"),
             Lesson.new("b", "fact", "`search(...)` returns {'data': {'items': [{'name': str}, ...]}}: its records are "
                                     "`result['data']['items']`.", origin="observed", tags=["shape"])]
    rows = {row[10][:3]: row[1] for row in lessons_table(build_report("b", [], found, now=NOW)).rows}
    assert rows == {"`x ": "fact (fix)", "CSV": "fact", "`se": "fact (shape)"}


def test_a_recipe_shows_the_first_lines_of_its_code_escaped_on_the_page() -> None:
    short = "rows = read('<f>')\nfinal_answer(sum(r['amount'] for r in rows))"
    long = "\n".join(f"x{i} = {i}" for i in range(15))
    found = [Lesson.new("b", "approach", "Working code for a task like: total", origin="recipe",
                        recipe=Recipe(code=short, task="total")),
             Lesson.new("b", "approach", "Working code for a task like: count", origin="recipe",
                        recipe=Recipe(code=long, task="count")),
             Lesson.new("b", "fact", "CSV files use ';' as separator")]
    document = build_report("b", [], found, now=NOW)
    texts = {row[10].splitlines()[0]: row[10] for row in lessons_table(document).rows}
    assert texts["Working code for a task like: total"].splitlines()[1:] == short.splitlines()
    shown = texts["Working code for a task like: count"].splitlines()[1:]
    assert shown[:12] == [f"x{i} = {i}" for i in range(12)] and shown[12:] == ["… (3 more lines)"]
    assert texts["CSV files use ';' as separator"] == "CSV files use ';' as separator"
    page = render_html(document, report_tables(document), None)
    assert "rows = read(&#x27;&lt;f&gt;&#x27;)" in page and "<f>" not in page


def test_the_lessons_table_says_how_many_teaching_runs_failed() -> None:
    taught = [Lesson.new("b", "approach", "Sum the qty column.").model_copy(update={"evidence": 3, "failed_runs": 2}),
              Lesson.new("b", "fact", "CSV files use ';' as separator").model_copy(update={"evidence": 2})]
    document = build_report("b", [], taught, now=NOW)
    assert {row["kind"]: row["failed_runs"] for row in document["lessons"]} == {"approach": 2, "fact": 0}
    assert {row[1]: row[8] for row in lessons_table(document).rows} == {"approach": "3 (2 failed)", "fact": "2"}


BLOCK_MATPLOTLIB = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "matplotlib" or name.startswith("matplotlib."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Block())
""")


def test_without_matplotlib_the_report_is_tables_and_says_how_to_get_plots(tmp_path: Path) -> None:
    script = BLOCK_MATPLOTLIB + textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from lessonbank.core.models import RunSummary
        from lessonbank.report import build_report, render_plots, report_tables, write_report
        summaries = [RunSummary(run_id=str(i), bank="b", verdict="success", started_at=i) for i in range(5)]
        document = build_report("b", summaries, [])
        plots = render_plots(document)
        written = write_report(Path({str(tmp_path)!r}), document, report_tables(document), plots)
        print(json.dumps([plots, [p.name for p in written], "matplotlib" in sys.modules]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    plots, written, imported = json.loads(out)
    assert plots is None and written == ["report.html", "report.json"] and not imported
    page = (tmp_path / "report.html").read_text()
    assert "pip install &#x27;lessonbank[report]&#x27;" in page and "<table" in page and "<img" not in page


def test_identical_arms_save_zero_tokens_not_minus_zero() -> None:
    summaries = [RunSummary(run_id=f"r{i}", bank="b", arm="lessons" if i % 2 else "control", verdict="success",
                            started_at=NOW - 100 + i, input_tokens=100, output_tokens=10) for i in range(4)]
    document = build_report("b", summaries, [], now=NOW)
    saved = document["difference"]["tokens_saved_per_run"]
    assert saved == {"estimate": 0.0, "low": 0.0, "high": 0.0}
    assert all(math.copysign(1.0, value) == 1.0 for value in saved.values()) and "-0.0" not in json.dumps(document)
    [row] = [row for row in report_tables(document)[0].rows if row[0] == "tokens saved per run"]
    assert row[-1] == "+0.00 [+0.00, +0.00]"


def test_a_tool_name_with_dollar_signs_is_drawn_as_text() -> None:
    summaries = runs("lessons", "sfs", 900, NOW - 3600)
    for i, summary in enumerate(summaries):  # unbalanced mathtext, and a pair that would be drawn as math
        summary.tools = {r"$\frac{a}{$b": ToolStats(calls=1, errors=i % 2, seconds=[0.1]),
                         "price_in_$_or_$": ToolStats(calls=2, errors=0, seconds=[0.1])}
    plots = render_plots(build_report("b", summaries, [], now=NOW))
    assert plots is not None and pixels_vary(plots["tool_errors"])


def test_a_narrow_terminal_prints_the_lessons_text_at_full_width_after_the_table() -> None:
    text = ("`get_invoice(...)` returns {'invoice': str, 'lines': [{'qty': int, 'unit_price_cents': int}, ...]}: "
            "its records are `result['lines']`.")
    found = [Lesson.new("b", "fact", text), Lesson.new("b", "fact", "CSV files use ';' as separator")]
    document = build_report("b", runs("lessons", "sfs", 100, NOW - 100), found, now=NOW)
    narrow = render_text(report_tables(document), "h", width=100)
    # left to rich, the text column got ten characters a line; now every line of it has the width
    listed = narrow.split("text (by id):\n", 1)[1]
    assert "`get_invoice(...)` returns {'invoice': str, 'lines': [{'qty': int," in listed
    assert all(len(line) <= 100 for line in narrow.splitlines())
    lessons_header = next(line for line in narrow.splitlines() if "┃ id" in line)
    assert "text" not in lessons_header and "utility" in lessons_header
    assert "early third" in narrow.split("Lessons", 1)[0]  # the comparison table is whole: no long text in it
    wide = render_text(report_tables(document), "h", width=400)
    assert "text (by id)" not in wide and text in wide  # it fits: one table, one line per lesson
