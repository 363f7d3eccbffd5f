"""The images rebuild the same: a base pinned by digest, packages from locks in step with pyproject.toml, no
compiler and no smolagents in the worker, a build context without secrets, health checks for every service."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from tests.e2e.test_deploy import ROOT, SECRETS, compose

REQUIREMENTS = ROOT / "deploy" / "requirements"


def name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def requirements(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def pinned(lock: Path) -> dict[str, str]:
    """Package -> version of a lock compiled with hashes (``name==version \\``, then its hashes)."""
    found = dict(re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\]+)", lock.read_text(), re.M))
    return {name(k): v for k, v in found.items()}


def test_the_lock_inputs_are_derived_from_pyproject() -> None:
    """Changing a dependency in pyproject.toml without compiling the locks again fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core, extras = project["dependencies"], project["optional-dependencies"]
    worker = [r for r in core if name(r) != "smolagents"] + extras["worker"] + extras["metrics"] + extras["flower"]
    assert requirements(REQUIREMENTS / "worker.in") == worker
    assert requirements(REQUIREMENTS / "agent.in") == core


def test_each_lock_pins_every_input_with_hashes() -> None:
    for role in ("worker", "agent"):
        lock = REQUIREMENTS / f"{role}.lock.txt"
        versions = pinned(lock)
        assert {name(r) for r in requirements(REQUIREMENTS / f"{role}.in")} <= set(versions), role
        assert lock.read_text().count("--hash=sha256:") >= len(versions), role  # --require-hashes installs it
    assert "smolagents" in pinned(REQUIREMENTS / "agent.lock.txt")
    assert "smolagents" not in pinned(REQUIREMENTS / "worker.lock.txt")  # no agent runs in the worker


def stages(dockerfile: str) -> dict[str, str]:
    """Stage name -> its text."""
    parts = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    return {part.split("\n", 1)[0].split(" AS ")[-1].strip(): part for part in parts}


def test_the_base_is_pinned_by_digest_and_no_compiler_reaches_a_final_image() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    found = stages(dockerfile)
    named = set(found)
    for stage, text in found.items():
        base = text.split("\n", 1)[0].split(" AS ")[0].strip()
        assert base in named or re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", base), (stage, base)
    assert [stage for stage, text in found.items() if "build-essential" in text] == ["llm-build"]
    assert "pip install" not in found["llm-build"] and "COPY --from=llm-build /wheels" in found["llm"]
    assert "VOLUME" not in dockerfile  # volumes are named in compose, one per role


def test_the_build_context_leaves_out_secrets_and_environments() -> None:
    rules = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert rules[0] == "*"  # everything is left out, then what the images copy is let in
    allowed = {line[1:] for line in rules if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "LICENSE", "lessonbank/", "deploy/requirements/*.lock.txt",
                       "scripts/fetch_embed_model.py"}
    copied = set(re.findall(r"^COPY (?!--from)(.+) \S+$", (ROOT / "Dockerfile").read_text(), re.M))
    for sources in copied:
        for source in sources.split():
            assert any(source.rstrip("/") == a.rstrip("/") or a.startswith(source) or
                       re.fullmatch(a.replace(".", r"\.").replace("*", ".*"), source) for a in allowed), source


def test_every_service_has_a_health_check_and_state_is_in_named_volumes() -> None:
    result = compose("--profile", "local-llm", "config", "--format", "json", env=SECRETS)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    for service in ("redis", "qdrant", "worker", "beat", "flower"):
        assert services[service]["healthcheck"]["test"], service
    assert services["worker"]["healthcheck"]["test"] == ["CMD", "lessonbank", "status", "--worker"]
    assert services["beat"]["healthcheck"]["test"] == ["CMD", "lessonbank", "status", "--beat"]
    for service, spec in services.items():
        for volume in spec.get("volumes", []):
            assert volume["type"] == "volume" and volume["source"], (service, volume)  # none anonymous
    assert services["worker"].get("tmpfs") == ["/data"] and not services["worker"].get("volumes")
    assert services["worker"]["build"]["target"] == "worker"
