"""Regenerate items.jsonl: seeded arithmetic questions with exact integer answers.

Run from anywhere: ``python eval_suites/quality/arithmetic/generate.py``. The output is
deterministic, so the suite's digest only changes when this script does.
"""

import json
import random
from pathlib import Path

OPS = {"addition": ("+", lambda a, b: a + b), "subtraction": ("-", lambda a, b: a - b),
       "multiplication": ("*", lambda a, b: a * b)}
SIZES = {"one-digit": (1, 9), "two-digit": (10, 99)}
PER_CELL = 40


def main() -> None:
    rng = random.Random(20261129)
    rows = []
    for op_name, (symbol, fn) in OPS.items():
        for size_name, (lo, hi) in SIZES.items():
            for i in range(PER_CELL):
                a, b = rng.randint(lo, hi), rng.randint(lo, hi)
                if op_name == "subtraction" and b > a:
                    # keep answers non-negative: a small model's sign handling is another skill
                    a, b = b, a
                rows.append({"id": f"{op_name[:3]}-{size_name[:3]}-{i:02d}", "a": a, "b": b,
                             "op": symbol, "answer": fn(a, b), "slices": [op_name, size_name]})
    out = Path(__file__).with_name("items.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} items to {out}")


if __name__ == "__main__":
    main()
