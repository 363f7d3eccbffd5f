"""Retrieval quality with the real MiniLM model, and bank isolation on every read path, on both stores
(qdrant-client in memory; the embedded Qdrant Edge shard)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.qdrant import LessonStore

BANK = "data-agent"

# (task a later run gets, the lesson an earlier run learnt that it needs)
PAIRS: list[tuple[str, str, str]] = [
    ("Load sales.csv into a dataframe and sum the revenue column.",
     "approach", "sales.csv is semicolon separated: read it with pandas.read_csv(path, sep=';')."),
    ("Download the invoices from the billing API for March.",
     "failure", "The billing API hangs on large date ranges; always pass timeout=30 to requests.get."),
    ("Plot the monthly temperature series and save the chart as a PNG.",
     "approach", "Call matplotlib.use('Agg') before importing pyplot: there is no display on this machine."),
    ("Parse the order timestamps and group orders by day.",
     "fact", "Order timestamps are Unix epoch milliseconds, so use pd.to_datetime(col, unit='ms')."),
    ("Read the customers.xlsx spreadsheet and count customers per country.",
     "approach", "Excel files need the openpyxl engine: pandas.read_excel(path, engine='openpyxl')."),
    ("Query the Postgres analytics database for yesterday's signups.",
     "fact", "The analytics database is reachable only through the read replica at port 5433, not 5432."),
    ("Fetch the product list from the inventory REST endpoint.",
     "failure", "The inventory endpoint paginates with a cursor field; stopping after page one misses most products."),
    ("Translate the German support tickets into English.",
     "fact", "Support ticket files are encoded in latin-1, not UTF-8; open them with encoding='latin-1'."),
    ("Compute the average basket value per store from transactions.parquet.",
     "approach", "transactions.parquet is 8 GB: read only the needed columns with pyarrow or memory runs out."),
    ("Send the weekly report email to the finance team.",
     "failure", "The SMTP relay rejects attachments over 10 MB; compress the report or link to it instead."),
    ("Scrape the competitor price page and extract the prices.",
     "failure", "The competitor site blocks the default python-requests User-Agent; set a browser User-Agent header."),
    ("Join the users table with the events table on user id.",
     "fact", "In the events table the user id column is called uid and is a string, while users.id is an integer."),
    ("Resize all product photos in the images folder to 512 pixels wide.",
     "approach", "Use Pillow's Image.thumbnail to keep the aspect ratio when shrinking pictures."),
    ("Train a classifier to predict customer churn.",
     "failure", "Churn labels are heavily imbalanced (3% positive); accuracy is misleading, report F1 or AUC instead."),
    ("Convert the prices from dollars to euros for the European report.",
     "fact", "Exchange rates come from the ECB daily XML feed; the rates there are per one euro, not per dollar."),
    ("Unzip the archive of log files and find the most frequent error.",
     "approach", "The log archive is a .tar.gz, not a zip: open it with tarfile.open(path, 'r:gz')."),
    ("Write the cleaned data back to the shared S3 bucket.",
     "fact", "Uploads to the shared bucket need the bucket-owner-full-control ACL or the upload is denied."),
    ("Calculate how many days passed between each shipment and its delivery.",
     "failure", "Shipment and delivery dates are in different time zones; convert both to UTC before subtracting."),
    ("Count the words in every PDF contract in the legal folder.",
     "approach", "Extract PDF text with pypdf's PdfReader; scanned contracts have no text layer and need OCR."),
    ("Deduplicate the contacts list before importing it into the CRM.",
     "approach", "Contacts repeat with different email case; lowercase and strip emails before dropping duplicates."),
    ("Run the nightly ETL job and check that it finished.",
     "fact", "The ETL job writes a _SUCCESS marker file in the output folder when it completes."),
    ("Call the geocoding service for each address in the file.",
     "failure", "The geocoding service allows 5 requests a second; without a pause between calls it returns HTTP 429."),
    ("Sort the leaderboard by score and show the top ten players.",
     "fact", "Scores in the leaderboard JSON are strings; cast them to int before sorting or '9' ranks above '10'."),
    ("Build a pivot table of revenue by region and quarter.",
     "approach", "Use pandas.pivot_table with aggfunc='sum' and fill_value=0 so empty region-quarter cells show zero."),
]


def open_store(kind: str, embedder: FastEmbedEmbedder, folder: Path) -> LessonStoreBase:
    if kind == "edge":
        return EdgeLessonStore(folder / "edge", embedder)
    return LessonStore(QdrantClient(":memory:"), embedder)


@pytest.fixture(scope="module", params=["qdrant-client", "edge"])
def store(request: pytest.FixtureRequest, embedder: FastEmbedEmbedder,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[LessonStoreBase]:
    store = open_store(request.param, embedder, tmp_path_factory.mktemp("retrieval"))
    store.upsert([Lesson.new(BANK, kind, text) for _, kind, text in PAIRS])  # type: ignore[arg-type]
    # the same lessons in another bank, and that bank's own lessons: none may leak into BANK's results
    store.upsert([Lesson.new("other-bank", kind, text) for _, kind, text in PAIRS])  # type: ignore[arg-type]
    store.upsert([Lesson.new("other-bank", "fact", f"Other bank note {i} about CSV files and APIs.") for i in range(5)])
    yield store
    store.close()


def test_there_are_enough_pairs() -> None:
    assert len(PAIRS) >= 20
    assert len({text for _, _, text in PAIRS}) == len(PAIRS)


@pytest.mark.parametrize(("task", "kind", "text"), PAIRS, ids=[f"pair{i:02d}" for i in range(len(PAIRS))])
def test_the_right_lesson_is_in_the_top_three(store: LessonStoreBase, task: str, kind: str, text: str) -> None:
    found = store.search(BANK, task, limit=3)
    assert all(found_lesson.bank == BANK for found_lesson, _ in found)
    assert text in [found_lesson.text for found_lesson, _ in found], [x.text for x, _ in found]


def test_most_tasks_get_their_lesson_first(store: LessonStoreBase) -> None:
    firsts = sum(store.search(BANK, task, limit=1)[0][0].text == text for task, _, text in PAIRS)
    assert firsts >= 0.75 * len(PAIRS)


@pytest.mark.parametrize("kind", ["qdrant-client", "edge"])
def test_no_read_path_returns_another_banks_lessons(kind: str, embedder: FastEmbedEmbedder, tmp_path: Path) -> None:
    store = open_store(kind, embedder, tmp_path)
    mine = [Lesson.new("mine", kind, text) for _, kind, text in PAIRS[:6]]  # type: ignore[arg-type]
    theirs = [Lesson.new("theirs", kind, text) for _, kind, text in PAIRS[:12]]  # type: ignore[arg-type]
    store.upsert(mine + theirs)
    their_ids = [lesson.id for lesson in theirs]
    assert set(their_ids).isdisjoint(lesson.id for lesson in mine)  # ids are per bank

    assert store.get("mine", their_ids) == []
    for task, _, _ in PAIRS[:12]:
        assert {x.bank for x, _ in store.similar("mine", task, limit=20)} == {"mine"}
        assert {x.bank for x, _ in store.search("mine", task, limit=20)} == {"mine"}
    assert {x.bank for x in store.list("mine", include_inactive=True)} == {"mine"}
    assert len(store.list("mine")) == 6
    assert store.banks() == {"mine": 6, "theirs": 12}

    # writes that name a bank leave the other bank alone too
    assert store.set_status("mine", their_ids, "forgotten") == 0
    assert store.set_counts("mine", {lesson_id: {"harmful": 9} for lesson_id in their_ids}) == 0
    assert all(x.status == "active" and x.harmful == 0 for x in store.get("theirs", their_ids))
    assert store.get("nobody", their_ids + [lesson.id for lesson in mine]) == []
    assert store.search("nobody", PAIRS[0][0]) == [] and store.similar("nobody", PAIRS[0][0]) == []
    assert store.rank("nobody", PAIRS[0][0]) == []
    assert {x.bank for x, _, _ in store.rank("mine", PAIRS[0][0])} == {"mine"}
    store.close()
