"""Families whose tools return records: ``ledger`` (voided payments), ``expenses`` (several currencies with a rate)
and ``tickets`` (a default limit that truncates the list).

Each family: a world builder (entities, records, a figure a second tool gives), the true and the naive
reading of a world, the tools the agent gets (docstrings silent about the trap), and its questions.
"""

from __future__ import annotations

import random
from typing import Any

from families import Family, Question, View, World, entity, standard_questions

_WORDS = ["atlas", "borealis", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "iris", "juniper", "kestrel",
          "lumen", "meridian", "nimbus", "orchid", "pioneer", "quartz", "riviera", "sierra", "tundra"]
_PEOPLE = ["Ana Silva", "Ben Okafor", "Chloe Martin", "Dev Patel", "Eva Novak", "Femi Adeyemi", "Greta Berg",
           "Hugo Laurent", "Ines Moreau", "Jonas Weber"]


def _date(rng: random.Random) -> str:
    return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _unknown(kind: str, value: Any, known: dict[str, Any]) -> ValueError:
    return ValueError(f"no {kind} {value!r}; known: {', '.join(sorted(known))}")


# -- ledger: voided transactions were never paid; their status says so ---------------------------------------


def _ledger_world(rng: random.Random) -> World:
    accounts: dict[str, Any] = {}
    while len(accounts) < 3:
        transactions = [{"id": f"TX-{rng.randint(10000, 99999)}", "date": _date(rng),
                         "amount": round(rng.uniform(12, 900), 2), "status": "settled"}
                        for _ in range(rng.randint(6, 9))]
        for transaction in rng.sample(transactions, rng.randint(2, 3)):
            transaction["status"] = "void"
        transactions.sort(key=lambda t: t["date"])
        accounts[f"ACC-{rng.randint(1000, 9999)}"] = {
            "owner": rng.choice(_PEOPLE), "opening_balance": round(rng.uniform(4000, 9000), 2),
            "transactions": transactions}
    return {"accounts": accounts}


def _ledger_view(world: World, naive: bool) -> View:
    accounts = world["accounts"]
    return {"values": {name: [t["amount"] for t in acc["transactions"] if naive or t["status"] != "void"]
                       for name, acc in accounts.items()},
            "extra": {name: acc["opening_balance"] for name, acc in accounts.items()}}


def _ledger_tools(world: World) -> list[Any]:
    accounts = world["accounts"]

    def account_of(account: str) -> dict[str, Any]:
        found = accounts.get(str(account).strip().upper())
        if found is None:
            raise _unknown("account", account, accounts)
        return found

    def list_transactions(account: str) -> list:
        """Return the transactions of an account: a list with one dict per transaction.

        Args:
            account: Account id, e.g. "ACC-1234".
        """
        return [dict(t) for t in account_of(account)["transactions"]]

    def get_account(account: str) -> dict:
        """Return the details of an account: a dict with its owner and opening_balance.

        Args:
            account: Account id, e.g. "ACC-1234".
        """
        found = account_of(account)
        return {"account": str(account).strip().upper(), "owner": found["owner"], "currency": "EUR",
                "opening_balance": found["opening_balance"]}

    return [list_transactions, get_account]


def _left_after(view: View, fields: dict[str, Any]) -> float:
    return view["extra"][fields["a"]] - sum(entity(view, fields))


LEDGER = Family(
    "ledger", "voided transactions (status 'void') were never paid and must be left out",
    'each transaction has "status": "settled" or "void"', _ledger_world, _ledger_view, _ledger_tools,
    standard_questions({
        "total": ("Using list_transactions, how much has account {a} paid in total?",
                  "What is the total amount account {a} has paid? Use list_transactions.",
                  "Account {a}: how much money has it paid out altogether, going by list_transactions?"),
        "maximum": ("Using list_transactions, what is the largest payment account {a} has made?",
                    "What was the biggest amount account {a} paid in a single payment? list_transactions has "
                    "its payments."),
        "count_above": ("Using list_transactions, how many payments of more than {t} euros has account {a} made?",
                        "How many times did account {a} pay more than {t} euros, according to list_transactions?"),
        "difference": ("Using list_transactions, how much more has account {a} paid in total than account {b}?",
                       "Accounts {a} and {b}: by how much does what {a} paid exceed what {b} paid? Use "
                       "list_transactions."),
        "average": ("Using list_transactions, what is the average payment of account {a}? Round to 2 decimals.",
                    "On average, how much did account {a} pay per payment (list_transactions)? Round to 2 decimals."),
    }, ("list_transactions",), step=10.0) + (
        Question("mixed", (
            "Using get_account and list_transactions, what is account {a}'s opening balance minus the total "
            "of all its payments?",
            "How much is left of account {a}'s opening balance (get_account) after all the payments it made "
            "(list_transactions)?"),
            lambda rng, world, view: {"a": rng.choice(sorted(view["values"]))}, _left_after,
            ("get_account", "list_transactions")),
    ),
)


# -- expenses: amounts in several currencies, each with its rate to euros ----------------------------------------

_RATES = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17, "CHF": 1.05, "JPY": 0.0062, "SEK": 0.088}
_SPANS = {"JPY": (1500.0, 90000.0), "SEK": (150.0, 9000.0)}
_ITEMS = ["flights", "hotel", "software licence", "conference pass", "laptop", "team dinner", "train tickets",
          "cloud credits", "office rent", "printer toner", "taxi", "training course"]


def _expenses_world(rng: random.Random) -> World:
    teams: dict[str, Any] = {}
    for name in rng.sample(_WORDS, 3):
        expenses = []
        currencies = ["EUR", *rng.sample([c for c in _RATES if c != "EUR"], 3)]
        for item in rng.sample(_ITEMS, rng.randint(5, 8)):
            currency = rng.choice(currencies)
            low, high = _SPANS.get(currency, (15.0, 900.0))
            rate = 1.0 if currency == "EUR" else round(_RATES[currency] * rng.uniform(0.97, 1.03), 4)
            expenses.append({"item": item, "amount": round(rng.uniform(low, high), 2), "currency": currency,
                             "rate_to_eur": rate})
        if sum(1 for e in expenses if e["currency"] != "EUR") < 2:
            continue
        spent = sum(e["amount"] * e["rate_to_eur"] for e in expenses)
        teams[f"team-{name}"] = {"expenses": expenses, "budget": int(spent / 1000 + rng.randint(1, 6)) * 1000}
    return {"teams": teams} if len(teams) == 3 else _expenses_world(rng)


def _expenses_view(world: World, naive: bool) -> View:
    teams = world["teams"]
    return {"values": {name: [e["amount"] * (1.0 if naive else e["rate_to_eur"]) for e in team["expenses"]]
                       for name, team in teams.items()},
            "extra": {name: float(team["budget"]) for name, team in teams.items()}}


def _expenses_tools(world: World) -> list[Any]:
    teams = world["teams"]

    def team_of(team: str) -> dict[str, Any]:
        found = teams.get(str(team).strip().lower())
        if found is None:
            raise _unknown("team", team, teams)
        return found

    def list_expenses(team: str) -> list:
        """Return the expenses of a team: a list with one dict per expense.

        Args:
            team: Team name, e.g. "team-orion".
        """
        return [dict(e) for e in team_of(team)["expenses"]]

    def get_budget(team: str) -> dict:
        """Return the yearly budget of a team: a dict whose "budget" is the amount.

        Args:
            team: Team name, e.g. "team-orion".
        """
        return {"team": str(team).strip().lower(), "year": 2024, "budget": team_of(team)["budget"],
                "currency": "EUR"}

    return [list_expenses, get_budget]


EXPENSES = Family(
    "expenses", "amounts are in several currencies; each must be converted with its rate_to_eur before adding up",
    'each expense has "currency": "USD" and "rate_to_eur": 0.92', _expenses_world, _expenses_view, _expenses_tools,
    standard_questions({
        "total": ("Using list_expenses, how much has {a} spent in total, in euros?",
                  "What are the total expenses of {a} in euros? Use list_expenses.",
                  "{a}: what does its spending in list_expenses add up to, in euros?"),
        "maximum": ("Using list_expenses, what is the most expensive single expense of {a}, in euros?",
                    "What was the largest expense of {a} in list_expenses, in euros?"),
        "count_above": ("Using list_expenses, how many expenses of {a} cost more than {t} euros?",
                        "How many of {a}'s expenses (list_expenses) are above {t} euros?"),
        "difference": ("Using list_expenses, how many euros more than {b} has {a} spent?",
                       "{a} and {b}: by how many euros does the spending of {a} exceed that of {b}? Use "
                       "list_expenses."),
        "average": ("Using list_expenses, what is the average expense of {a} in euros? Round to 2 decimals.",
                    "On average, how many euros did one expense of {a} cost, going by list_expenses? Round to 2 "
                    "decimals."),
    }, ("list_expenses",), step=10.0, tolerance=0.05) + (
        Question("mixed", (
            "Using get_budget and list_expenses, how many euros of its budget does {a} have left?",
            "How much of {a}'s yearly budget (get_budget) is left after its expenses (list_expenses), in euros?"),
            lambda rng, world, view: {"a": rng.choice(sorted(view["values"]))}, _left_after,
            ("get_budget", "list_expenses"), tolerance=0.05),
    ),
)


# -- tickets: the search returns 10 tickets unless asked for more, and says it truncated ------------------------

_POINTS = [1, 2, 3, 5, 8, 13]
_TITLES = ["login fails", "slow search", "export broken", "typo on invoice", "crash on upload", "dark mode",
           "flaky test", "update docs", "timeout in sync", "wrong totals", "add filter", "retry on error",
           "missing icon", "cache stale", "rate limit", "audit log", "rename field", "bulk delete", "sso setup",
           "csv import", "memory leak", "locale dates", "email digest", "mobile layout", "api pagination"]
DEFAULT_LIMIT = 10


def _tickets_world(rng: random.Random) -> World:
    projects: dict[str, Any] = {}
    for word in rng.sample(_WORDS, 3):
        code = word[:4].upper()
        count = rng.randint(14, 24)
        tickets = [{"id": f"{code}-{number}", "title": title, "points": rng.choice(_POINTS), "opened": _date(rng)}
                   for number, title in zip(rng.sample(range(100, 999), count), rng.sample(_TITLES, count),
                                            strict=True)]
        tickets.sort(key=lambda t: t["opened"], reverse=True)
        projects[code] = {"tickets": tickets, "team_size": rng.randint(3, 7), "name": word.title()}
    return {"projects": projects}


def _tickets_view(world: World, naive: bool) -> View:
    projects = world["projects"]
    return {"values": {code: [t["points"] for t in p["tickets"][:DEFAULT_LIMIT if naive else None]]
                       for code, p in projects.items()},
            "extra": {code: float(p["team_size"]) for code, p in projects.items()}}


def _tickets_tools(world: World) -> list[Any]:
    projects = world["projects"]

    def project_of(project: str) -> dict[str, Any]:
        found = projects.get(str(project).strip().upper())
        if found is None:
            raise _unknown("project", project, projects)
        return found

    def search_tickets(project: str, limit: int | None = DEFAULT_LIMIT) -> dict:
        """Return the open tickets of a project, newest first: a dict whose "tickets" is a list with one dict
        per ticket.

        Args:
            project: Project code, e.g. "ORIO".
            limit: Maximum number of tickets.
        """
        if limit is None:  # the schema marks an argument with a default as nullable: None means the default
            limit = DEFAULT_LIMIT
        try:
            limit = int(limit)
        except (TypeError, ValueError):
            raise ValueError(f"limit must be a whole number, not {limit!r}") from None
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        tickets = project_of(project)["tickets"]
        return {"project": str(project).strip().upper(), "tickets": [dict(t) for t in tickets[:limit]],
                "returned": min(limit, len(tickets)), "truncated": len(tickets) > limit}

    def get_project(project: str) -> dict:
        """Return the details of a project: a dict with its name and team_size.

        Args:
            project: Project code, e.g. "ORIO".
        """
        found = project_of(project)
        return {"project": str(project).strip().upper(), "name": found["name"], "team_size": found["team_size"]}

    return [search_tickets, get_project]


def _per_member(view: View, fields: dict[str, Any]) -> float:
    return sum(entity(view, fields)) / view["extra"][fields["a"]]


TICKETS = Family(
    "tickets", "search_tickets returns at most 10 tickets by default; the others need a larger limit",
    'the result says "returned": 10, "truncated": true', _tickets_world, _tickets_view, _tickets_tools,
    standard_questions({
        "total": ("Using search_tickets, how many story points do the open tickets of project {a} add up to?",
                  "What is the total of the story points of project {a}'s open tickets? Use search_tickets.",
                  "Project {a}: how many story points are still open, according to search_tickets?"),
        "maximum": ("Using search_tickets, what is the largest story-point estimate among project {a}'s open "
                    "tickets?",
                    "What is the highest number of story points of any open ticket of project {a}? "
                    "search_tickets finds them."),
        "count_above": ("Using search_tickets, how many open tickets of project {a} are estimated at more than {t} "
                        "points?",
                        "How many of project {a}'s open tickets (search_tickets) have more than {t} story points?"),
        "difference": ("Using search_tickets, how many more open story points does project {a} have than project "
                       "{b}?",
                       "Projects {a} and {b}: by how many story points does {a}'s open work exceed {b}'s? Use "
                       "search_tickets."),
        "average": ("Using search_tickets, what is the average story-point estimate of project {a}'s open tickets? "
                    "Round to 2 decimals.",
                    "On average, how many story points does an open ticket of project {a} have "
                    "(search_tickets)? Round to "
                    "2 decimals."),
    }, ("search_tickets",), step=1.0) + (
        Question("mixed", (
            "Using get_project and search_tickets, what are the story points of all the open tickets of project "
            "{a} added up, per member of its team? Round to 2 decimals.",
            "Add up the story points of all of project {a}'s open tickets (search_tickets) and divide the sum by its "
            "team size (get_project). Round to 2 decimals."),
            lambda rng, world, view: {"a": rng.choice(sorted(view["values"]))}, _per_member,
            ("get_project", "search_tickets")),
    ),
)

FAMILIES_RECORDS = (LEDGER, EXPENSES, TICKETS)
