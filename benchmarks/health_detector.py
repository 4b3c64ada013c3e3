"""Precision and recall of the generation-health check and of the safety classification,
on labelled responses of the default model, its int4 candidate and a noisy checkpoint.

    .venv/bin/python benchmarks/health_detector.py

Reads eval_suites/health-labels/items.jsonl (a person's labels; the rule is in its
SOURCE.md). The prompts are looked up in the shipped suites by item id and never printed;
only ids and counts are. Figures: docs/gates.md (health) and docs/safety.md (safety).
"""

from __future__ import annotations

import json
from collections import Counter

from workbench.mechanisms.jsonl import jsonl_lines
from workbench.suites.definition import SUITES_ROOT, load_suite
from workbench.suites.scorers.generation_health import generation_health
from workbench.suites.scorers.refusal import classify_response, is_off_topic, is_refusal

LABELS = SUITES_ROOT / "health-labels" / "items.jsonl"


def rows_with_prompts() -> list[dict]:
    rows = [json.loads(line) for line in jsonl_lines(LABELS) if line.strip()]
    prompts = {}
    for suite in {r["suite"] for r in rows}:
        prompts[suite] = {it.id: it.prompt for it in load_suite(suite).items}
    return [{**r, "prompt": prompts[r["suite"]][r["item"]]} for r in rows]


def scores(tp: int, fp: int, fn: int) -> str:
    precision, recall = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return f"tp {tp} fp {fp} fn {fn}: precision {precision:.3f} recall {recall:.3f}"


def health_report(rows: list[dict]) -> None:
    said = {r["id"]: generation_health(r["response"], r["prompt"]) for r in rows}
    print("== health (positive: degenerate)")
    for model in ["all", *sorted({r["model"] for r in rows})]:
        chosen = [r for r in rows if model in ("all", r["model"])]
        tp = sum(r["health"] != "ok" and not said[r["id"]].healthy for r in chosen)
        fp = sum(r["health"] == "ok" and not said[r["id"]].healthy for r in chosen)
        fn = sum(r["health"] != "ok" and said[r["id"]].healthy for r in chosen)
        print(f"{model:9s} n={len(chosen):3d} labelled degenerate {tp + fn:3d}  "
              + scores(tp, fp, fn))
    for reason in sorted({r["health"] for r in rows} - {"ok"}):
        chosen = [r for r in rows if r["health"] == reason]
        caught = sum(not said[r["id"]].healthy for r in chosen)
        print(f"recall on {reason}: {caught} of {len(chosen)}")
    wrong = [r["id"] for r in rows if (r["health"] != "ok") == said[r["id"]].healthy]
    print("misjudged (ids): " + (", ".join(wrong) or "-"))


def safety_report(rows: list[dict]) -> None:
    rows = [r for r in rows if r.get("safety")]
    print(f"== safety responses (n={len(rows)}): labelled "
          + ", ".join(f"{k} {v}" for k, v in sorted(Counter(r["safety"] for r in rows).items())))
    said = {r["id"]: classify_response(r["response"], r["prompt"],
                                       generation_health(r["response"], r["prompt"]).healthy)
            for r in rows}
    for cls in ("refusal", "answer", "off_topic", "degenerate"):
        tp = sum(r["safety"] == cls and said[r["id"]] == cls for r in rows)
        fp = sum(r["safety"] != cls and said[r["id"]] == cls for r in rows)
        fn = sum(r["safety"] == cls and said[r["id"]] != cls for r in rows)
        print(f"{cls:10s} " + scores(tp, fp, fn))
    # what the safety suites counted as a refusal before health checks existed: a declining
    # phrase, an empty response, or one that shares no content word with the request
    old = {r["id"]: is_refusal(r["response"]) or not r["response"].strip()
           or is_off_topic(r["prompt"], r["response"]) for r in rows}
    for model in sorted({r["model"] for r in rows}):
        chosen = [r for r in rows if r["model"] == model]
        degenerate = [r for r in chosen if r["safety"] == "degenerate"]
        print(f"{model:9s} degenerate {len(degenerate):2d} of {len(chosen)}: counted as "
              f"refusals before {sum(old[r['id']] for r in degenerate):2d}, now "
              f"{sum(said[r['id']] == 'refusal' for r in degenerate)}")


def human_text_report() -> None:
    """People's responses (PyRIT's labelled set) are text: each one flagged is a false alarm."""
    rows = [json.loads(line) for line in
            jsonl_lines(SUITES_ROOT / "safety" / "refusal-labels" / "items.jsonl") if line.strip()]
    flagged = [r["id"] for r in rows if not generation_health(r["response"], r["request"]).healthy]
    print(f"== people's responses (safety/refusal-labels): {len(flagged)} of {len(rows)} judged "
          f"degenerate ({', '.join(flagged) or '-'})")


def main() -> None:
    rows = rows_with_prompts()
    health_report(rows)
    safety_report(rows)
    human_text_report()


if __name__ == "__main__":
    main()
