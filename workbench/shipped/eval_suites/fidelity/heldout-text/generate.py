"""Build items.jsonl from the held-out passages in calibration_data/heldout.jsonl.

    python eval_suites/fidelity/heldout-text/generate.py

Each passage becomes one item; its slices are its domain group (drama, verse, code,
language) and its exact domain (code:python, language:deu, ...). The calibration files
share no passage with these, so quantisation never saw them.
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = HERE.parents[2] / "calibration_data" / "heldout.jsonl"


def main() -> None:
    rows = []
    for line in SOURCE.read_text().splitlines():
        row = json.loads(line)
        group = row["domain"].split(":")[0]
        slices = [group] if group == row["domain"] else [group, row["domain"]]
        rows.append({"id": row["id"], "text": row["text"], "slices": slices})
    (HERE / "items.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} items")


if __name__ == "__main__":
    main()
