"""Families whose numbers come as text or need a field beside them: ``traffic`` (counts written with thousands
separators), ``exports`` (a European CSV export: byte-order mark, ``;`` and decimal commas) and ``events`` (start
times in UTC, the venue's offset in another field).

Each family: a world builder, the true and the naive reading of a world, the tools the agent gets
(docstrings silent about the trap), and its questions.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from families import Family, Question, View, World, entity, standard_questions
from families_records import _WORDS, _date, _unknown

_CITIES = ["lisbon", "porto", "ghent", "graz", "turin", "bergen", "cork", "leipzig", "malmo", "split", "riga", "bonn"]


def _comma_decimal(text: str) -> float:
    """What a reader who takes the comma for a decimal point makes of "12,345"."""
    return float(text.replace(",", "."))


# -- traffic: daily visit counts written as text with thousands separators ---------------------------------------


def _traffic_world(rng: random.Random) -> World:
    sites: dict[str, Any] = {}
    for word in rng.sample(_WORDS, 3):
        start = datetime(2024, rng.randint(1, 11), rng.randint(1, 20))
        visits = [rng.randint(1000, 30000) for _ in range(7)]
        visits[rng.randrange(7)] = rng.randint(300, 999)  # one quiet day, written without a separator
        days = [{"date": (start + timedelta(days=i)).strftime("%Y-%m-%d"), "visits": f"{v:,}",
                 "signups": f"{rng.randint(3, 400):,}"} for i, v in enumerate(visits)]
        goal = max(1000, (sum(visits) - rng.randint(1000, 20000)) // 1000 * 1000)
        sites[f"web-{word}"] = {"days": days, "weekly_goal": f"{goal:,}", "owner": rng.choice(["growth", "brand"])}
    return {"sites": sites}


def _traffic_view(world: World, naive: bool) -> View:
    def number(text: str) -> float:
        return _comma_decimal(text) if naive else float(text.replace(",", ""))

    sites = world["sites"]
    return {"values": {name: [number(d["visits"]) for d in site["days"]] for name, site in sites.items()},
            "extra": {name: number(site["weekly_goal"]) for name, site in sites.items()}}


def _traffic_tools(world: World) -> list[Any]:
    sites = world["sites"]

    def site_of(site: str) -> dict[str, Any]:
        found = sites.get(str(site).strip().lower())
        if found is None:
            raise _unknown("site", site, sites)
        return found

    def get_daily_stats(site: str) -> list:
        """Return a website's statistics for each of the last seven days: a list with one dict per day.

        Args:
            site: Site id, e.g. "web-orion".
        """
        return [dict(d) for d in site_of(site)["days"]]

    def get_site(site: str) -> dict:
        """Return the details of a website: a dict with its team and weekly_goal.

        Args:
            site: Site id, e.g. "web-orion".
        """
        found = site_of(site)
        return {"site": str(site).strip().lower(), "team": found["owner"], "weekly_goal": found["weekly_goal"]}

    return [get_daily_stats, get_site]


def _above_goal(view: View, fields: dict[str, Any]) -> float:
    return sum(entity(view, fields)) - view["extra"][fields["a"]]


TRAFFIC = Family(
    "traffic", "visit counts are text with thousands separators ('12,345'); they must be parsed before any arithmetic",
    'each day has "visits": "12,345" (a string)', _traffic_world, _traffic_view, _traffic_tools,
    standard_questions({
        "total": ("Using get_daily_stats, how many visits did site {a} get in total over the days it lists?",
                  "What is the total number of visits of {a} across the days get_daily_stats returns?",
                  "{a}: how many visits over the last seven days altogether, going by get_daily_stats?"),
        "maximum": ("Using get_daily_stats, what was the highest number of visits site {a} got in one day?",
                    "What is the best day of {a} in visits (get_daily_stats)? Give the number of visits."),
        "count_above": ("Using get_daily_stats, on how many days did site {a} get more than {t} visits?",
                        "How many days did {a} have more than {t} visits, according to get_daily_stats?"),
        "difference": ("Using get_daily_stats, how many more visits did {a} get in total than {b}?",
                       "Sites {a} and {b}: by how many visits does {a}'s total in get_daily_stats exceed {b}'s?"),
        "average": ("Using get_daily_stats, what is the average number of daily visits of {a}? Round to 2 "
                    "decimals.",
                    "How many visits did {a} get per day on average, going by get_daily_stats? Round to 2 decimals."),
    }, ("get_daily_stats",), step=100.0) + (
        Question("mixed", (
            "Using get_site and get_daily_stats, by how many visits did {a}'s total over the listed days beat its "
            "weekly goal?",
            "How far above its weekly goal (get_site) were the visits of {a} over the last seven days "
            "(get_daily_stats)?"),
            lambda rng, world, view: {"a": rng.choice(sorted(view["values"]))}, _above_goal,
            ("get_site", "get_daily_stats")),
    ),
)


# -- exports: a spreadsheet export with a byte-order mark, ';' between fields and decimal commas -----------------


def _exports_world(rng: random.Random) -> World:
    shops: dict[str, Any] = {}
    for city in rng.sample(_CITIES, 3):
        orders = [{"amount": round(rng.uniform(8, 990), 2), "order": f"O-{rng.randint(10000, 99999)}",
                   "customer": rng.choice(["Ana", "Ben", "Chloe", "Dev", "Eva", "Femi", "Greta", "Hugo"]),
                   "date": _date(rng)} for _ in range(rng.randint(6, 10))]
        shops[f"shop-{city}"] = {"orders": orders, "commission_rate": rng.choice([0.03, 0.04, 0.05, 0.06, 0.08])}
    return {"shops": shops}


def _exports_view(world: World, naive: bool) -> View:
    def amount(value: float) -> float:  # the export writes 12.5 as "12,50"; read naively, that is 1250
        return round(value * 100) if naive else value

    shops = world["shops"]
    return {"values": {name: [amount(o["amount"]) for o in shop["orders"]] for name, shop in shops.items()},
            "extra": {name: shop["commission_rate"] for name, shop in shops.items()}}


def export_text(orders: list[dict[str, Any]]) -> str:
    """The CSV a spreadsheet in a European locale writes: BOM, ';' between fields, decimal commas, CRLF."""
    rows = ["Amount;Order;Customer;Date"]
    for o in orders:
        year, month, day = o["date"].split("-")
        rows.append(f"{o['amount']:.2f}".replace(".", ",") + f";{o['order']};{o['customer']};{day}.{month}.{year}")
    return "\ufeff" + "\r\n".join(rows) + "\r\n"


def _exports_tools(world: World) -> list[Any]:
    shops = world["shops"]

    def shop_of(shop: str) -> dict[str, Any]:
        found = shops.get(str(shop).strip().lower())
        if found is None:
            raise _unknown("shop", shop, shops)
        return found

    def export_orders(shop: str) -> str:
        """Return a shop's orders as a CSV export: one str, a header line and then one line per order.

        Args:
            shop: Shop id, e.g. "shop-oslo".
        """
        return export_text(shop_of(shop)["orders"])

    def get_shop(shop: str) -> dict:
        """Return the details of a shop: a dict with its commission_rate.

        Args:
            shop: Shop id, e.g. "shop-oslo".
        """
        return {"shop": str(shop).strip().lower(), "currency": "EUR",
                "commission_rate": shop_of(shop)["commission_rate"]}

    return [export_orders, get_shop]


def _commission(view: View, fields: dict[str, Any]) -> float:
    return sum(entity(view, fields)) * view["extra"][fields["a"]]


EXPORTS = Family(
    "exports", "the export is CSV with a byte-order mark, ';' between fields and decimal commas ('12,50')",
    'the text starts "\\ufeffAmount;Order;..." and amounts read "12,50"', _exports_world, _exports_view,
    _exports_tools,
    standard_questions({
        "total": ("Using export_orders, what is the total amount of shop {a}'s orders?",
                  "What do the orders of {a} add up to? Use export_orders.",
                  "{a}: what is the sum of its order amounts in export_orders?"),
        "maximum": ("Using export_orders, what is the largest order amount of shop {a}?",
                    "What was the biggest single order of {a}? export_orders has them."),
        "count_above": ("Using export_orders, how many orders of shop {a} are above {t} euros?",
                        "How many of {a}'s orders (export_orders) are worth more than {t} euros?"),
        "difference": ("Using export_orders, by how much does the order total of {a} exceed that of {b}?",
                       "Shops {a} and {b}: how many euros more did {a}'s orders bring in than {b}'s? Use "
                       "export_orders."),
        "average": ("Using export_orders, what is the average order amount of shop {a}? Round to 2 decimals.",
                    "How much is an order of {a} worth on average, going by export_orders? Round to 2 decimals."),
    }, ("export_orders",), step=10.0) + (
        Question("mixed", (
            "Using get_shop and export_orders, how much commission does shop {a} owe: its commission rate times "
            "its order total? Round to 2 decimals.",
            "What is {a}'s commission (get_shop) on the total of its orders (export_orders)? Round to 2 decimals."),
            lambda rng, world, view: {"a": rng.choice(sorted(view["values"]))}, _commission,
            ("get_shop", "export_orders")),
    ),
)


# -- events: start times in UTC; the venue's offset sits in another field ---------------------------------------

_OFFSETS = [-7, -5, -4, 8, 9, 10]
_SHOWS = ["jazz night", "poetry slam", "string quartet", "stand-up", "film club", "tango class", "choir", "quiz night",
          "puppet show", "organ recital", "salsa social", "book talk"]


def _events_world(rng: random.Random) -> World:
    venues: dict[str, Any] = {}
    day = datetime(2024, rng.randint(1, 12), rng.randint(1, 25))
    for city in rng.sample(_CITIES, 3):
        offset = rng.choice(_OFFSETS)
        events = []
        for show in rng.sample(_SHOWS, rng.randint(6, 9)):
            local = day + timedelta(days=rng.randint(0, 2), hours=rng.randint(9, 23), minutes=rng.choice([0, 30]))
            start = (local - timedelta(hours=offset)).strftime("%Y-%m-%dT%H:%M:00Z")
            events.append({"event": show, "start_utc": start, "utc_offset": f"{'+' if offset >= 0 else '-'}"
                           f"{abs(offset):02d}:00", "price": float(rng.choice([12, 15, 18, 20, 25, 30]))})
        events.sort(key=lambda e: e["start_utc"])
        venues[f"venue-{city}"] = {"events": events, "capacity": rng.choice([80, 120, 150, 200, 250, 300])}
    return {"venues": venues}


def _events_view(world: World, naive: bool) -> View:
    def local(event: dict[str, Any]) -> datetime:
        start = datetime.strptime(event["start_utc"], "%Y-%m-%dT%H:%M:00Z")
        sign = 1 if event["utc_offset"].startswith("+") else -1
        return start if naive else start + sign * timedelta(hours=int(event["utc_offset"][1:3]))

    venues = world["venues"]
    return {"values": {name: [(local(e), e["event"]) for e in v["events"]] for name, v in venues.items()},
            "extra": {name: float(v["capacity"]) for name, v in venues.items()}}


def _late(view: View, name: str, hour: int) -> int:
    return sum(1 for start, _ in view["values"][name] if start.hour >= hour)


def _late_fields(rng: random.Random, world: World, view: View) -> dict[str, Any]:
    return {"a": rng.choice(sorted(view["values"])), "h": rng.choice([17, 18, 19, 20])}


def _date_fields(rng: random.Random, world: World, view: View) -> dict[str, Any]:
    name = rng.choice(sorted(view["values"]))
    return {"a": name, "d": rng.choice(view["values"][name])[0].strftime("%Y-%m-%d")}


def _show_fields(rng: random.Random, world: World, view: View) -> dict[str, Any]:
    name = rng.choice(sorted(view["values"]))
    return {"a": name, "e": rng.choice(view["values"][name])[1]}


def _two_fields(rng: random.Random, world: World, view: View) -> dict[str, Any]:
    first, second = rng.sample(sorted(view["values"]), 2)
    if _late(view, first, 18) < _late(view, second, 18):
        first, second = second, first
    return {"a": first, "b": second}


def _on_date(view: View, f: dict[str, Any]) -> float:
    return float(sum(1 for start, _ in view["values"][f["a"]] if start.strftime("%Y-%m-%d") == f["d"]))


def _start_hour(view: View, f: dict[str, Any]) -> float:
    return float(next(start.hour for start, show in view["values"][f["a"]] if show == f["e"]))


EVENTS = Family(
    "events", "start times are UTC; the local time needs the utc_offset field",
    'each event has "start_utc": "...Z" and "utc_offset": "+09:00"', _events_world, _events_view,
    lambda world: _events_tools(world),  # defined below, next to its tools' docstrings
    (
        Question("count_above", (
            "Using list_events, how many events at {a} start at {h}:00 or later, local time?",
            "How many of {a}'s events (list_events) begin at {h}:00 or later in the venue's local time?"),
            _late_fields, lambda v, f: float(_late(v, f["a"], int(f["h"]))), ("list_events",), 0.0),
        Question("count_on_date", (
            "Using list_events, how many events does {a} host on {d} (the venue's local date)?",
            "How many events take place at {a} on {d}, local date, according to list_events?"),
            _date_fields, _on_date, ("list_events",), 0.0),
        Question("maximum", (
            "Using list_events, what is the latest local start hour (0-23) of the events at {a}?",
            "At {a}, what is the latest hour of the day (0-23, local time) at which an event of list_events starts?"),
            lambda rng, world, view: {"a": rng.choice(sorted(view["values"]))},
            lambda v, f: float(max(s.hour for s, _ in v["values"][f["a"]])), ("list_events",), 0.0, hour=True),
        Question("lookup", (
            "Using list_events, at what local hour (0-23) does '{e}' at {a} start?",
            "'{e}' at {a}: at what hour of the day, local time, does it begin (0-23)? list_events has it."),
            _show_fields, _start_hour, ("list_events",), 0.0, hour=True),
        Question("difference", (
            "Using list_events, how many more events starting at 18:00 or later (local time) does {a} have than "
            "{b}?",
            "Venues {a} and {b}: how many more evening events (local start 18:00 or later) does {a} host? Use "
            "list_events."),
            _two_fields, lambda v, f: float(_late(v, f["a"], 18) - _late(v, f["b"], 18)), ("list_events",), 0.0),
        Question("mixed", (
            "Using get_venue and list_events, how many seats do the events at {a} starting at {h}:00 or later "
            "(local time) offer in total, if each offers the venue's full capacity?",
            "Each event at {a} offers the venue's capacity (get_venue). How many seats do its events starting at "
            "{h}:00 or later, local time, offer altogether (list_events)?"),
            _late_fields, lambda v, f: v["extra"][f["a"]] * _late(v, f["a"], int(f["h"])),
            ("get_venue", "list_events"), 0.0),
    ),
)


def _events_tools(world: World) -> list[Any]:
    venues = world["venues"]

    def venue_of(venue: str) -> dict[str, Any]:
        found = venues.get(str(venue).strip().lower())
        if found is None:
            raise _unknown("venue", venue, venues)
        return found

    def list_events(venue: str) -> list:
        """Return the upcoming events of a venue: a list with one dict per event.

        Args:
            venue: Venue id, e.g. "venue-oslo".
        """
        return [dict(e) for e in venue_of(venue)["events"]]

    def get_venue(venue: str) -> dict:
        """Return the details of a venue: a dict with its capacity.

        Args:
            venue: Venue id, e.g. "venue-oslo".
        """
        return {"venue": str(venue).strip().lower(), "capacity": venue_of(venue)["capacity"]}

    return [list_events, get_venue]


FAMILIES_TEXT = (TRAFFIC, EXPORTS, EVENTS)
