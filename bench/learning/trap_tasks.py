"""Recurring tasks with a trap, for the learning benchmark: data, tools, variants and checkers (no LLM).

Each task hides one trap. The tools' docstrings say nothing about it; the data the tools return
hints at it (``"page": 1, "pages": 3``, a field named ``amount_cents``, ``"unit": "box of 12"``, an
error message naming the expected format, ...). Each task comes in several variants (other ids,
dates, values; the same trap), built deterministically, so that a later run meets a *similar* task,
never a verbatim repeat. The checker knows each variant's answer.

Everything here is pure Python apart from :func:`tools_for`, which wraps a variant's world in
smolagents tools.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VARIANTS_PER_TASK = 6
NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")


@dataclass(frozen=True)
class Variant:
    """One instance of a task: its prompt, its world (what the tools serve) and its answer."""

    key: str
    prompt: str
    answer: float | str
    world: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrapTask:
    """A recurring task: how to build its variants and tools, and how to check an answer."""

    name: str
    trap: str
    hint: str
    build: Callable[[random.Random, int], Variant]
    tools: Callable[[Variant], list[Callable[..., Any]]]
    tolerance: float = 0.0

    def variants(self, count: int = VARIANTS_PER_TASK, seed: int = 0, reworded: bool = False) -> list[Variant]:
        """``count`` variants, the same on every machine and every call (seeded by the task's name and
        ``seed``: another ``seed`` gives other ids and values behind the same trap). ``reworded``: the same
        variants, each asked in another wording than the one before it (see :data:`REWORDINGS`)."""
        rng = random.Random(f"lessonbank-learning:{self.name}" + (f":{seed}" if seed else ""))
        built = [self.build(rng, index) for index in range(count)]
        return [reword(self.name, variant, index) for index, variant in enumerate(built)] if reworded else built

    def check(self, variant: Variant, answer: Any) -> bool:
        """True when ``answer`` is the variant's answer (see :func:`matches`)."""
        return matches(answer, variant.answer, self.tolerance)


def parse_numbers(answer: Any) -> list[float]:
    """The numbers in an answer: the value itself when it is a number, else every number in its text."""
    if isinstance(answer, bool):
        return []
    if isinstance(answer, int | float):
        return [float(answer)]
    return [float(found.replace(",", ".")) for found in NUMBER.findall(str(answer).replace("\u2212", "-"))]


def matches(answer: Any, expected: float | str, tolerance: float = 0.0) -> bool:
    """Whether ``answer`` is ``expected``.

    A text answer is compared whole (case and surrounding quotes ignored). A numeric answer must
    contain exactly one number (``"12"``, ``12.0``, ``"125.47 EUR"``), within ``tolerance`` of the
    expected value: an answer listing several candidates is wrong.
    """
    if answer is None:
        return False
    if isinstance(expected, str):
        return str(answer).strip().strip("'\"` ").lower() == expected.lower()
    numbers = parse_numbers(answer)
    return len(numbers) == 1 and abs(numbers[0] - expected) <= tolerance + 1e-9


# -- paged_orders: the orders API returns one page at a time ------------------------------------------------


def _build_paged_orders(rng: random.Random, index: int) -> Variant:
    customer = f"C-{rng.randint(1000, 9999)}"
    pages = 2 + index % 3
    per_page = 5
    count = per_page * (pages - 1) + rng.randint(1, per_page - 1)
    orders = [
        {"id": f"O-{rng.randint(10000, 99999)}", "date": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
         "total": round(rng.uniform(5, 250), 2)}
        for _ in range(count)
    ]
    prompt = f"Using list_orders, how many orders has customer {customer} placed in total? Answer with the number only."
    return Variant(customer, prompt, count, {"customer": customer, "orders": orders, "per_page": per_page})


def orders_page(world: dict[str, Any], customer: str, page: int = 1) -> dict[str, Any]:
    """What ``list_orders`` answers: one page of the customer's orders and where the next one is."""
    customer = str(customer)
    if customer.strip() != world["customer"]:
        raise ValueError(f"no customer with id {customer!r}")
    per_page = world["per_page"]
    orders = world["orders"]
    pages = -(-len(orders) // per_page)
    try:
        page = int(page)
    except (TypeError, ValueError):
        raise ValueError(f"invalid page {page!r}") from None
    start = (page - 1) * per_page
    chunk = orders[start:start + per_page] if page >= 1 else []
    return {"customer": world["customer"], "orders": chunk, "page": page, "pages": pages,
            "next": f"page={page + 1}" if page < pages else None}


def _tools_paged_orders(variant: Variant) -> list[Callable[..., Any]]:
    world = variant.world

    def list_orders(customer: str, page: int = 1) -> dict:
        """Return the orders of a customer.

        Args:
            customer: Customer id, e.g. "C-1234".
            page: Page number.
        """
        return orders_page(world, customer, page)

    return [list_orders]


# -- invoice_cents: amounts are integers in a field named amount_cents ----------------------------------------

_ITEMS = ["desk lamp", "office chair", "monitor arm", "keyboard", "usb hub", "webcam", "headset", "notebook",
          "cable set", "mouse pad"]


def _build_invoice_cents(rng: random.Random, index: int) -> Variant:
    invoice = f"INV-{rng.randint(1000, 9999)}"
    lines = [{"item": item, "qty": rng.randint(1, 3), "unit_price_cents": rng.randint(250, 4999)}
             for item in rng.sample(_ITEMS, 3 + index % 3)]
    total = round(sum(line["qty"] * line["unit_price_cents"] for line in lines) / 100, 2)
    prompt = f"Using get_invoice, what is the total of invoice {invoice} in euros? Answer with the number only."
    return Variant(invoice, prompt, total, {"invoice": invoice, "lines": lines})


def invoice_record(world: dict[str, Any], invoice_id: str) -> dict[str, Any]:
    """What ``get_invoice`` answers."""
    invoice_id = str(invoice_id)
    if invoice_id.strip() != world["invoice"]:
        raise ValueError(f"no invoice with id {invoice_id!r}")
    return {"invoice": world["invoice"], "currency": "EUR", "lines": world["lines"]}


def _tools_invoice_cents(variant: Variant) -> list[Callable[..., Any]]:
    world = variant.world

    def get_invoice(invoice_id: str) -> dict:
        """Return an invoice.

        Args:
            invoice_id: Invoice id, e.g. "INV-1234".
        """
        return invoice_record(world, invoice_id)

    return [get_invoice]


# -- date_format: the weather service wants DD.MM.YYYY and says so in its error ----------------------------------

_CITIES = ["Lyon", "Porto", "Graz", "Ghent", "Turin", "Leipzig", "Bergen", "Cork"]


def _build_date_format(rng: random.Random, index: int) -> Variant:
    city = _CITIES[index % len(_CITIES)]
    iso = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    max_c = round(rng.uniform(-3, 31), 1)
    min_c = round(max_c - rng.uniform(4, 12), 1)
    prompt = f"Using get_weather, what was the highest temperature in {city} on {iso}? Answer with the number only."
    return Variant(f"{city} {iso}", prompt, max_c, {"city": city, "iso": iso, "max_c": max_c, "min_c": min_c})


def weather_record(world: dict[str, Any], city: str, date: str) -> dict[str, Any]:
    """What ``get_weather`` answers; a date not written DD.MM.YYYY is refused with a one-line error."""
    city, date = str(city), str(date)
    if not re.fullmatch(r"\d{2}\.\d{2}\.\d{4}", date.strip()):
        raise ValueError(f"invalid date {date!r}: expected DD.MM.YYYY, e.g. 31.12.2023")
    if city.strip().lower() != world["city"].lower():
        raise ValueError(f"no station for city {city!r}")
    year, month, day = world["iso"].split("-")
    if date.strip() != f"{day}.{month}.{year}":
        return {"city": world["city"], "date": date.strip(), "records": []}
    return {"city": world["city"], "date": date.strip(),
            "records": [{"station": f"{world['city']}-1", "max_c": world["max_c"], "min_c": world["min_c"]}]}


def _tools_date_format(variant: Variant) -> list[Callable[..., Any]]:
    world = variant.world

    def get_weather(city: str, date: str) -> dict:
        """Return the weather records of a city for one day.

        Args:
            city: City name.
            date: The day.
        """
        return weather_record(world, city, date)

    return [get_weather]


# -- nested_catalog: the search result's items sit under data.items; "total" counts every match ----------------

_PRODUCTS = {
    "lamp": ["desk lamp", "floor lamp", "clip lamp", "reading lamp", "wall lamp", "lamp shade", "smart lamp",
             "camping lamp", "bedside lamp"],
    "mug": ["coffee mug", "travel mug", "tea mug", "enamel mug", "beer mug", "mug set", "espresso mug", "soup mug"],
    "chair": ["office chair", "folding chair", "bar chair", "kids chair", "garden chair", "rocking chair",
              "desk chair", "gaming chair"],
}


def _build_nested_catalog(rng: random.Random, index: int) -> Variant:
    query = list(_PRODUCTS)[index % len(_PRODUCTS)]
    names = rng.sample(_PRODUCTS[query], 6 + index % 2)
    limit = 15 + 5 * index + rng.choice([0, 1, 2])
    items = [{"name": name, "price": round(rng.uniform(limit * 0.4, limit * 1.8), 2)} for name in names]
    for item in items:
        if abs(item["price"] - limit) < 0.5:
            item["price"] = round(item["price"] + 1.0, 2)
    answer = sum(1 for item in items if item["price"] < limit)
    hidden = rng.randint(5, 40)  # matches beyond this page of results: "total" is not the answer
    prompt = (f"Using search_catalog, how many '{query}' products cost less than {limit} euros? "
              "Answer with the number only.")
    return Variant(f"{query}<{limit}", prompt, answer, {"query": query, "items": items, "total": len(items) + hidden})


def catalog_search(world: dict[str, Any], query: str) -> dict[str, Any]:
    """What ``search_catalog`` answers."""
    wanted = str(query).strip().lower()
    items = [item for item in world["items"] if wanted and (wanted in item["name"] or world["query"] in wanted)]
    return {"status": "ok", "data": {"items": items, "total": world["total"] if items else 0}, "took_ms": 12}


def _tools_nested_catalog(variant: Variant) -> list[Callable[..., Any]]:
    world = variant.world

    def search_catalog(query: str) -> dict:
        """Search the product catalog.

        Args:
            query: Words to look for in product names.
        """
        return catalog_search(world, query)

    return [search_catalog]


# -- stock_packs: quantities are counted in packs, and the pack size is in a "unit" field -----------------------

_STOCK_ITEMS = [("M6 bolts", "BOLT-M6", "box of 12", 12), ("AA batteries", "BAT-AA", "pack of 4", 4),
                ("eggs", "EGG-L", "tray of 30", 30), ("pencils", "PEN-HB", "pack of 10", 10),
                ("wine bottles", "WINE-RED", "case of 6", 6), ("M8 nuts", "NUT-M8", "box of 25", 25)]


def _build_stock_packs(rng: random.Random, index: int) -> Variant:
    thing, sku, unit, size = _STOCK_ITEMS[index % len(_STOCK_ITEMS)]
    warehouses = [{"warehouse": name, "qty": rng.randint(2, 40)} for name in rng.sample(
        ["north", "south", "east", "west", "harbour", "airport"], 3)]
    answer = size * sum(w["qty"] for w in warehouses)
    prompt = f"Using get_stock, how many {thing} ({sku}) are in stock in total? Answer with the number only."
    return Variant(sku, prompt, answer, {"sku": sku, "unit": unit, "warehouses": warehouses})


def stock_record(world: dict[str, Any], sku: str) -> list[dict[str, Any]]:
    """What ``get_stock`` answers: one row per warehouse, each with the pack it counts in."""
    sku = str(sku)
    if sku.strip().upper() != world["sku"]:
        raise ValueError(f"unknown sku {sku!r}")
    return [{**row, "sku": world["sku"], "unit": world["unit"]} for row in world["warehouses"]]


def _tools_stock_packs(variant: Variant) -> list[Callable[..., Any]]:
    world = variant.world

    def get_stock(sku: str) -> list:
        """Return the stock of a product in each warehouse.

        Args:
            sku: Product code.
        """
        return stock_record(world, sku)

    return [get_stock]


# -- semver_latest: the release list is sorted as text, so "1.9.0" comes after "1.10.0" -------------------------

_PACKAGES = ["fastjson", "tinyhttp", "qlog", "pyfoo", "datakit", "netwalk"]


def _build_semver_latest(rng: random.Random, index: int) -> Variant:
    package = _PACKAGES[index % len(_PACKAGES)]
    major = rng.randint(1, 3)
    high = rng.randint(10, 14)
    versions = {f"{major}.{minor}.{rng.randint(0, 4)}" for minor in rng.sample(range(2, 10), 4)}
    latest = f"{major}.{high}.{rng.randint(0, 3)}"
    versions |= {latest, f"{major}.{high - 1}.0", f"{major - 1}.{rng.randint(10, 19)}.0"}
    releases = [{"version": v, "yanked": False} for v in sorted(versions)]
    prompt = f"Using list_releases, what is the latest release of '{package}'? Answer with the version string only."
    return Variant(package, prompt, latest, {"package": package, "releases": releases})


def release_list(world: dict[str, Any], package: str) -> dict[str, Any]:
    """What ``list_releases`` answers: the releases sorted as text."""
    package = str(package)
    if package.strip().lower() != world["package"]:
        raise ValueError(f"no package named {package!r}")
    return {"package": world["package"], "releases": world["releases"], "sorted_by": "version (text)"}


def _tools_semver_latest(variant: Variant) -> list[Callable[..., Any]]:
    world = variant.world

    def list_releases(package: str) -> dict:
        """Return the releases of a package.

        Args:
            package: Package name.
        """
        return release_list(world, package)

    return [list_releases]


ALL_TASKS: dict[str, TrapTask] = {
    task.name: task
    for task in (
        TrapTask("paged_orders", "the orders API returns 5 orders per page; the count needs every page",
                 'the response ends with "page": 1, "pages": N, "next": "page=2"',
                 _build_paged_orders, _tools_paged_orders),
        TrapTask("invoice_cents", "prices are integer cents; the total in euros is sum(qty x unit_price_cents) / 100",
                 "the field is named unit_price_cents", _build_invoice_cents, _tools_invoice_cents, tolerance=0.005),
        TrapTask("date_format", "the weather service takes dates as DD.MM.YYYY, the task gives YYYY-MM-DD",
                 "the error message names the format", _build_date_format, _tools_date_format, tolerance=0.05),
        TrapTask("nested_catalog", "search results sit under data.items; data.total counts matches beyond them",
                 'the response is {"status": "ok", "data": {"items": [...], "total": N}}',
                 _build_nested_catalog, _tools_nested_catalog),
        TrapTask("stock_packs", "stock quantities are packs; the item count is qty x the pack size",
                 'each row has "qty": 4, "unit": "box of 12"', _build_stock_packs, _tools_stock_packs),
        TrapTask("semver_latest", "releases are sorted as text; the latest needs version ordering",
                 'the response says "sorted_by": "version (text)" and lists 1.9.x after 1.13.x',
                 _build_semver_latest, _tools_semver_latest),
    )
}
# The benchmark's tasks (``--tasks all``); the others can be named one by one. semver_latest is left out of the
# default set: the model never solved it unaided, and a full run is already long on 2 cores.
EXTRA_TASKS = ("semver_latest",)
TASKS: dict[str, TrapTask] = {name: task for name, task in ALL_TASKS.items() if name not in EXTRA_TASKS}


# The same questions asked other ways: with ``--reworded`` the n-th variant of a task takes wording n mod 4 (0: the
# usual prompt), so no two consecutive runs share their words. A recipe's values are put in for a later task
# only when the two tasks are the same words but for them; asked another way, the recipe comes with the values to
# adapt, as it would for a user who does not repeat a question word for word. Fields come from the variant.
REWORDINGS: dict[str, tuple[str, ...]] = {
    "invoice_cents": (
        "How much is invoice {invoice} in euros, according to get_invoice? Answer with the number only.",
        "Look up invoice {invoice} with get_invoice and tell me its total in euros. Answer with the number only.",
        "Invoice {invoice}: what does it come to in euros? Use get_invoice. Answer with the number only.",
    ),
    "date_format": (
        "How hot did it get at most in {city} on {iso}, according to get_weather? Answer with the number only.",
        "Look up the weather of {city} for {iso} with get_weather and give that day's maximum temperature. "
        "Answer with the number only.",
        "{city}, {iso}: what was the day's highest temperature? Use get_weather. Answer with the number only.",
    ),
    "nested_catalog": (
        "How many '{query}' products are priced below {limit} euros, according to search_catalog? "
        "Answer with the number only.",
        "Search the catalog for '{query}' with search_catalog and count the products under {limit} euros. "
        "Answer with the number only.",
        "'{query}' products cheaper than {limit} euros: how many are there? Use search_catalog. "
        "Answer with the number only.",
    ),
}


def reword(task: str, variant: Variant, index: int) -> Variant:
    """``variant`` asked in wording ``index`` mod 4 of ``task`` (0: as built); ValueError for a task without
    other wordings."""
    if task not in REWORDINGS:
        raise ValueError(f"task {task!r} has no other wordings; reworded tasks: {', '.join(REWORDINGS)}")
    wording = index % (len(REWORDINGS[task]) + 1)
    if wording == 0:
        return variant
    fields = {**variant.world, "limit": variant.key.partition("<")[2]}
    return Variant(variant.key, REWORDINGS[task][wording - 1].format(**fields), variant.answer, variant.world)


def tools_for(task: TrapTask, variant: Variant) -> list[Any]:
    """The variant's tools as smolagents tools (the docstrings above are what the agent reads)."""
    from smolagents import tool

    return [tool(function) for function in task.tools(variant)]
