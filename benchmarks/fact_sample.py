"""Seeded sample of cited facts for an audit against upstream (issue 21).

    python benchmarks/fact_sample.py [--seed 2026120101] [-n 60] [--lists 10] [-o benchmarks/results/fact_sample.yaml]

A fact is a YAML mapping under ``backends/`` or ``rules/`` that carries a ``source`` citing upstream (a
``owner/repo@commit:path`` read or an ``owner/repo#N`` PR or issue); sources that cite only this project
("this project: ...") are left out: they are checked by this project's tests, not by reading upstream.
``lists:`` decisions (``exhaustive:`` / ``open:``) are facts too and are sampled as their own stratum
(``--lists`` of the ``-n``), so that every audit reads some. The sample is a pure function of the seed and the
facts' text: the same tree gives the same sample. Output: one entry a fact (file, line, the mapping as written,
its source), in sample order, for the audit file ``tests/audit/fact_audit.yaml`` to judge.
"""
from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+(@[0-9a-f]{7,40}:|#\d+)")


def facts(repo: Path = REPO) -> tuple[list[dict], list[dict]]:
    """(support/condition facts, lists decisions) under backends/ and rules/, each {file, line, kind, text, source}."""
    plain: list[dict] = []
    decisions: list[dict] = []
    files = sorted(p for d in ("backends", "rules") for p in (repo / d).rglob("*.yaml"))
    for path in files:
        rel = path.relative_to(repo).as_posix()
        lines = path.read_text().splitlines()
        root = yaml.compose(path.read_text())

        def walk(node, key_path: tuple[str, ...], rel: str = rel, lines: list[str] = lines) -> None:
            if isinstance(node, yaml.MappingNode):
                keys = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
                for cite_key in ("source", "exhaustive", "open"):
                    v = keys.get(cite_key)
                    if isinstance(v, yaml.ScalarNode) and UPSTREAM.search(str(v.value)) \
                            and not str(v.value).startswith("this project"):
                        start, end = node.start_mark.line, node.end_mark.line
                        if not key_path:  # a file's own header fact: its top-level keys up to the source
                            end = min(end, v.end_mark.line + 1)
                        end = min(end, start + 25)
                        entry = {"file": rel, "line": start + 1, "path": "/".join(key_path),
                                 "text": "\n".join(lines[start:max(end, start + 1)]).rstrip(),
                                 "source": str(v.value)}
                        (decisions if cite_key != "source" and "lists" in key_path else plain).append(entry)
                        break
                for k, v in node.value:
                    walk(v, (*key_path, str(k.value)))
            elif isinstance(node, yaml.SequenceNode):
                for i, v in enumerate(node.value):
                    walk(v, (*key_path, str(i)))

        if root is not None:
            walk(root, ())
    return plain, decisions


def sample(seed: int, n: int, n_lists: int, repo: Path = REPO) -> list[dict]:
    """``n`` facts: ``n_lists`` lists decisions and ``n - n_lists`` others, drawn with ``random.Random(seed)``."""
    plain, decisions = facts(repo)
    rng = random.Random(seed)
    picked = rng.sample(decisions, min(n_lists, len(decisions)))
    picked += rng.sample(plain, n - len(picked))
    return [{"n": i + 1, **f} for i, f in enumerate(picked)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=2026120101)
    ap.add_argument("-n", type=int, default=60)
    ap.add_argument("--lists", type=int, default=10)
    ap.add_argument("-o", type=Path, default=REPO / "benchmarks" / "results" / "fact_sample.yaml")
    a = ap.parse_args()
    plain, decisions = facts()
    out = {"seed": a.seed, "population": {"facts": len(plain), "lists_decisions": len(decisions)},
           "sample": sample(a.seed, a.n, a.lists)}
    a.o.parent.mkdir(parents=True, exist_ok=True)
    a.o.write_text(yaml.safe_dump(out, sort_keys=False, width=120))
    print(f"{a.n} of {len(plain)} facts + {len(decisions)} lists decisions (seed {a.seed}) -> {a.o}")


if __name__ == "__main__":
    main()
