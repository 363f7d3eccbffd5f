"""The report page in a real browser: ``lessonbank report --out`` on recorded runs, opened from disk in
headless Chromium (Debian's /usr/bin/chromium). The rendered page holds the plots (decoded images of
non-zero size, painted in the arms' colours) and the tables, and untrusted lesson text stays text."""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from PIL import Image
from qdrant_client import QdrantClient

from lessonbank.cli.main import cli
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.report.plots import ARM_COLOURS
from tests.cli.test_report import BANK, BASE, write_scenario

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
HOSTILE = Lesson.new(BANK, "fact", "Orders <img src=x onerror=alert(1)> and <script>alert(2)</script> are data.")
PROBE = """<script>
window.addEventListener('load', () => {
  document.body.setAttribute('data-images', JSON.stringify(Array.from(document.images,
    i => ({id: i.id, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight, src: i.src.slice(0, 22)}))));
});
</script></body>"""


def chromium(profile: Path, *args: str) -> str:
    assert CHROMIUM.exists(), "Debian's chromium is needed: apt-get install -y chromium"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}"]
    done = subprocess.run([str(CHROMIUM), *flags, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Elements(HTMLParser):
    """Tags with their attributes, and the page's text, from a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(dom: str) -> Elements:
    parser = Elements()
    parser.feed(dom)
    return parser


@pytest.fixture
def page(settings: Settings, tmp_path: Path, embed_model_path: Path, embedder: FastEmbedEmbedder,
         redis_client: redis.Redis) -> Path:
    write_scenario(redis_client)
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    hostile = HOSTILE.model_copy(update={"given": 3, "helpful": 2, "first_seen": BASE + 900})
    LessonStore(client, embedder).upsert([hostile])
    client.close()
    env = {"LESSONBANK_REDIS_URL": settings.redis_url, "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
           "LESSONBANK_QDRANT_PATH": str(tmp_path / "qdrant"), "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path),
           "LESSONBANK_QDRANT_URL": None}
    result = CliRunner().invoke(cli, ["report", "--bank", BANK, "--out", str(tmp_path / "out")], env=env)
    assert result.exit_code == 0, result.output
    return tmp_path / "out" / "report.html"


def test_the_rendered_page_holds_the_plots_and_the_tables(page: Path, tmp_path: Path) -> None:
    dom = parse(chromium(tmp_path / "profile", "--dump-dom", page.as_uri()))
    images = [attrs for tag, attrs in dom.tags if tag == "img"]
    assert len(images) == 4 and all((a["src"] or "").startswith("data:image/png;base64,") for a in images)
    assert {a["id"] for tag, a in dom.tags if tag == "table"} == {"runs", "lessons", "held", "tools"}
    assert not [tag for tag, _ in dom.tags if tag == "script"]  # the lesson's markup stayed text
    text = "".join(dom.text)
    assert HOSTILE.text in text and "fetch_orders" in text and "80.0 %" in text and "60.0 %" in text

    probe = page.with_name("probe.html")  # the same page, plus a script that reports what the browser decoded
    csp = "style-src 'unsafe-inline'"
    html = page.read_text().replace(csp, csp + "; script-src 'unsafe-inline'")
    probe.write_text(html.replace("</body>", PROBE))
    probed = parse(chromium(tmp_path / "profile", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()))
    body = next(attrs for tag, attrs in probed.tags if tag == "body")
    decoded = json.loads(body["data-images"] or "[]")
    assert [i["id"] for i in decoded] == ["plot-success_rate", "plot-tokens", "plot-lessons", "plot-tool_errors"]
    assert all(i["complete"] and i["width"] > 300 and i["height"] > 100 for i in decoded), decoded


def test_the_screenshot_shows_both_arms_painted(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    chromium(tmp_path / "profile", "--window-size=1280,2200", "--hide-scrollbars", f"--screenshot={shot}",
             page.as_uri())
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    counts = {rgb: n for n, rgb in colours}

    def painted(hex_colour: str) -> int:
        target = tuple(int(hex_colour[i: i + 2], 16) for i in (1, 3, 5))
        return sum(n for rgb, n in counts.items() if all(abs(a - b) <= 12 for a, b in zip(rgb, target, strict=True)))

    assert painted(ARM_COLOURS["lessons"]) > 200 and painted(ARM_COLOURS["control"]) > 200
    assert len(counts) > 50  # not a blank page
