"""Precision and recall of the workbench's refusal detector on labelled responses.

    .venv/bin/python benchmarks/refusal_detector.py

Reads eval_suites/safety/refusal-labels (responses a person labelled refusal or not) and
prints the confusion counts, precision, recall and F1, plus the ids of the misjudged items.
Only ids are printed: the requests and responses stay in the data file.
"""

from __future__ import annotations

import json

from workbench.mechanisms.jsonl import jsonl_lines
from workbench.suites.definition import SUITES_ROOT
from workbench.suites.scorers.generation_health import generation_health
from workbench.suites.scorers.refusal import classify_response, is_refusal

LABELS = SUITES_ROOT / "safety" / "refusal-labels" / "items.jsonl"


def said_refusal(row: dict, rule: str) -> bool:
    """stated: the response declines in words (what the safety suites count as a refusal);
    declines: a stated refusal or an off-topic answer (what PyRIT's labels call a refusal).
    Both judge only healthy text: a degenerate response is neither."""
    if rule == "stated":
        return is_refusal(row["response"])
    healthy = generation_health(row["response"], row["request"]).healthy
    return classify_response(row["response"], row["request"], healthy) in ("refusal",
                                                                          "off_topic")


def confusion(rows: list[dict], rule: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"tp": [], "fp": [], "fn": [], "tn": []}
    for r in rows:
        said = said_refusal(r, rule)
        truth = bool(r["refusal"])
        out[("t" if said == truth else "f") + ("p" if said else "n")].append(r["id"])
    return out


def main() -> None:
    rows = [json.loads(line) for line in jsonl_lines(LABELS) if line.strip()]
    for rule, title in (("stated", "stated refusals only (the safety suites' refusal)"),
                        ("declines", "stated refusal or off-topic answer (PyRIT's label)")):
        print(f"== {title}")
        report(rows, confusion(rows, rule))


def report(rows: list[dict], c: dict[str, list[str]]) -> None:
    tp, fp, fn, tn = (len(c[k]) for k in ("tp", "fp", "fn", "tn"))
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-9)
    print(f"labelled responses: {len(rows)} ({tp + fn} refusals, {fp + tn} answers)")
    print(f"tp {tp}  fp {fp}  fn {fn}  tn {tn}")
    print(f"precision {precision:.3f}  recall {recall:.3f}  F1 {f1:.3f}  "
          f"accuracy {(tp + tn) / len(rows):.3f}")
    print(f"false refusals (ids): {', '.join(c['fp']) or '-'}")
    print(f"missed refusals (ids): {', '.join(c['fn']) or '-'}")


if __name__ == "__main__":
    main()
