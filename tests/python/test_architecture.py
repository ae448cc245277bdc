"""The crate layout, checked on `cargo metadata`: each workspace crate's
normal and build dependencies on other `nereid-*` crates must keep to
RULES. Dev-dependencies are left out on purpose: a test may use any crate
(the ensemble's tests parse configs with nereid-repository, for one) without
putting it into what the crate ships. A rule names a crate that may not
exist yet; it applies once that crate does. Every `nereid-*` crate needs a
rule or a place in FREE, so that a new crate cannot come in unruled."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from fnmatch import fnmatchcase
from graphlib import TopologicalSorter

import pytest

from conftest import REPO_ROOT

BACKEND = "nereid-backend-*"
WIRE_FRONTENDS = ("nereid-http", "nereid-grpc", "nereid-openai")
FRONTENDS = (*WIRE_FRONTENDS, "nereid-kafka", "nereid-batch")


@dataclass(frozen=True)
class Rule:
    only: bool  # True: `crates` is all it may use; False: it may use anything but them
    crates: tuple[str, ...]  # names or globs (BACKEND)
    why: str

    def forbids(self, dependency: str) -> bool:
        named = any(fnmatchcase(dependency, c) for c in self.crates)
        return not named if self.only else named


def only(*crates: str, why: str) -> Rule:
    return Rule(True, crates, why)


def never(*crates: str, why: str) -> Rule:
    return Rule(False, crates, why)


RULES = {
    "nereid-core": only(why="the types every crate shares; it sits under all of them"),
    "nereid-device": only("nereid-core", why="owns the devices; any layer may use it"),
    "nereid-protocol": only("nereid-core", why="wire formats, converted to core types only"),
    "nereid-repository": never("nereid-engine", BACKEND, *FRONTENDS, "nereid-server", why="reads model folders; it knows nothing of serving them"),
    "nereid-cloud": never("nereid-engine", BACKEND, "nereid-protocol", *FRONTENDS, "nereid-server", why="hands the repository a local folder (its lib.rs: no engine, backend, wire format)"),
    "nereid-scheduler": never("nereid-protocol", BACKEND, "nereid-engine", "nereid-repository", why="batches core requests for whatever runs them; the engine wires it up"),
    "nereid-ensemble": never("nereid-protocol", BACKEND, "nereid-engine", "nereid-repository", why="knows models only through the engine's interface (its lib.rs)"),
    BACKEND: never("nereid-engine", "nereid-protocol", "nereid-scheduler", "nereid-ensemble", *FRONTENDS, "nereid-server", why="a backend runs one model on core tensors; the engine calls it"),
    "nereid-cache": never("nereid-engine", "nereid-protocol", *FRONTENDS, BACKEND, "nereid-server", why="a service the engine uses, not one that uses it"),
    "nereid-traffic": never("nereid-engine", "nereid-protocol", *FRONTENDS, BACKEND, "nereid-server", why="a service the engine uses, not one that uses it"),
    "nereid-generation": only(why="schedules generation for a language-model backend, tested without a model or any other crate"),
    "nereid-residency": only("nereid-core", why="decides which models stay loaded; the engine's models come in through its traits"),
    "nereid-engine": never("nereid-protocol", *FRONTENDS, "nereid-edge", "nereid-trace", "nereid-server", BACKEND, why="serves core requests; backends come in as trait objects from nereid-server"),
    "nereid-trace": never("nereid-engine", *FRONTENDS, "nereid-server", BACKEND, "nereid-scheduler", "nereid-repository", why="request tracing for the frontends; it knows no engine or model store"),
    "nereid-edge": never("nereid-repository", "nereid-scheduler", "nereid-ensemble", BACKEND, *FRONTENDS, "nereid-server", "nereid-cloud", why="what frontends share at the door; the model store is the engine's"),
    **{name: never("nereid-repository", "nereid-scheduler", "nereid-ensemble", "nereid-cloud", BACKEND, "nereid-server", *WIRE_FRONTENDS, why="a frontend talks to the engine only, and not to another frontend") for name in WIRE_FRONTENDS},
    "nereid-kafka": never("nereid-repository", "nereid-scheduler", "nereid-ensemble", BACKEND, "nereid-server", *WIRE_FRONTENDS, why="a frontend talks to the engine only"),
    "nereid-batch": never("nereid-repository", "nereid-scheduler", "nereid-ensemble", BACKEND, "nereid-server", *WIRE_FRONTENDS, why="a frontend talks to the engine only"),
}
# Crates that may use any crate: the binary that wires everything together,
# and the fuzz checks, which drive whole request paths.
FREE = {"nereid-fuzz", "nereid-server"}
# Current dependencies that break a rule, each with why it is still there.
# Mend the code, then take the pair out: the test fails on a pair that no
# longer breaks its rule, so this set only shrinks.
KNOWN: dict[tuple[str, str], str] = {}


def rule_for(crate: str) -> Rule | None:
    if crate in RULES:
        return RULES[crate]
    return next((r for pattern, r in RULES.items() if fnmatchcase(crate, pattern)), None)


def edges(metadata: dict) -> set[tuple[str, str]]:
    """(crate, dependency) for each workspace crate's normal or build
    dependency on a `nereid-*` crate, whatever its target or features."""
    members = set(metadata["workspace_members"])
    return {(p["name"], d["name"]) for p in metadata["packages"] if p["id"] in members
            for d in p["dependencies"]
            if d["kind"] in (None, "build") and d["name"].startswith("nereid-")}


def breaches(metadata: dict) -> dict[tuple[str, str], str]:
    """Each dependency a rule forbids, with the rule's reason."""
    found = {}
    for crate, dependency in edges(metadata):
        rule = rule_for(crate)
        if crate not in FREE and rule is not None and rule.forbids(dependency):
            found[(crate, dependency)] = rule.why
    return found


def unruled(metadata: dict) -> list[str]:
    members = set(metadata["workspace_members"])
    names = {p["name"] for p in metadata["packages"] if p["id"] in members}
    return sorted(n for n in names
                  if n.startswith("nereid-") and n not in FREE and rule_for(n) is None)


def problems(metadata: dict, known: dict[tuple[str, str], str]) -> list[str]:
    """What the tree gets wrong: a forbidden dependency not in `known`, a
    `known` pair that no longer breaks a rule, a crate with no rule."""
    found = breaches(metadata)
    out = [f"{c} must not depend on {d}: {why}"
           for (c, d), why in sorted(found.items()) if (c, d) not in known]
    out += [f"{c} -> {d} no longer breaks a rule: take it out of KNOWN"
            for (c, d) in sorted(known) if (c, d) not in found]
    out += [f"{n} has no rule: add one to RULES or put it in FREE" for n in unruled(metadata)]
    return out


@pytest.fixture(scope="module")
def metadata() -> dict:
    out = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"],
                         cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout)


def test_the_workspace_keeps_to_the_layout(metadata):
    # An empty graph would pass everything below.
    assert ("nereid-engine", "nereid-core") in edges(metadata)
    assert problems(metadata, KNOWN) == []


def test_no_crate_cycle(metadata):
    graph: dict[str, set[str]] = {}
    for crate, dependency in edges(metadata):
        graph.setdefault(crate, set()).add(dependency)
    TopologicalSorter(graph).prepare()  # raises CycleError, naming the cycle


def package(name: str, *deps: tuple[str, str | None]) -> dict:
    return {"name": name, "id": f"path+file:///{name}#0.1.0",
            "dependencies": [{"name": d, "kind": kind} for d, kind in deps]}


def made(*packages: dict) -> dict:
    return {"packages": list(packages), "workspace_members": [p["id"] for p in packages]}


def test_a_forbidden_dependency_is_named_with_its_reason():
    tree = made(package("nereid-core"),
                package("nereid-device", ("nereid-core", None), ("nereid-protocol", None)),
                package("nereid-backend-x", ("nereid-core", None), ("nereid-engine", "build")),
                package("nereid-server", ("nereid-backend-x", None), ("nereid-engine", None)))
    assert problems(tree, {}) == [
        f"nereid-backend-x must not depend on nereid-engine: {RULES[BACKEND].why}",
        f"nereid-device must not depend on nereid-protocol: {RULES['nereid-device'].why}",
    ]


def test_a_dev_dependency_is_allowed():
    tree = made(package("nereid-ensemble", ("nereid-core", None), ("nereid-engine", "dev"),
                        ("nereid-repository", "dev")))
    assert problems(tree, {}) == []


def test_a_known_pair_is_allowed_until_it_is_gone():
    bad = made(package("nereid-engine", ("nereid-http", None)))
    known = {("nereid-engine", "nereid-http"): "being moved"}
    assert problems(bad, known) == []
    mended = made(package("nereid-engine", ("nereid-core", None)))
    assert problems(mended, known) == [
        "nereid-engine -> nereid-http no longer breaks a rule: take it out of KNOWN"]


def test_a_crate_without_a_rule_is_named():
    tree = made(package("nereid-new", ("nereid-core", None)), package("nereid-fuzz"))
    assert problems(tree, {}) == ["nereid-new has no rule: add one to RULES or put it in FREE"]
