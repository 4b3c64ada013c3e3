"""Regenerate items.jsonl: find a pass key hidden in long public-domain text.

Run from anywhere: ``python eval_suites/quality/long-context/generate.py``. Each item hides
a five-digit key at the start, middle or end of filler text (whole passages of Hamlet,
Macbeth and the Sonnets from calibration_data/shakespeare_milton.jsonl) cut to a target
length, and asks for it at the end. Lengths are set in characters at about 3.4 characters
per SmolLM2 token, so the buckets are approximate token counts; the longest stays under
the default config's 2,048-token context with room for the question and the answer.
A quantised KV cache or attention path that degrades with distance shows up in the long
buckets first.
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
FILLER = HERE.parents[2] / "calibration_data" / "shakespeare_milton.jsonl"
CHARS_PER_TOKEN = 3.4  # measured 3.2-3.8 on this filler with SmolLM2's tokenizer
BUCKETS = {"ctx-256": 256, "ctx-512": 512, "ctx-1024": 1024, "ctx-1600": 1600}
DEPTHS = ("start", "middle", "end")
PER_CELL = 3        # version 1's items, from the first seed; ids -0 to -2 in each cell
MORE_PER_CELL = 9   # version 2's, from a second seed: 144 items, so that one item lost
                    # no longer spans a 0.10 margin (docs/gates.md, "Evidence strength")
QUESTION = "\n\nWhat is the pass key? Reply with the number only."


def filler_text() -> str:
    rows = [json.loads(line) for line in FILLER.read_text().split("\n") if line.strip()]
    return "\n".join(r["text"] for r in rows if r["id"].startswith(("hamlet", "macbeth",
                                                                    "sonnets")))


def cells(rng: random.Random, per_cell: int, first: int, text: str) -> list[dict]:
    """per_cell items in each (bucket, depth) cell, numbered from `first` within it."""
    rows = []
    for bucket, tokens in BUCKETS.items():
        size = int(tokens * CHARS_PER_TOKEN)
        for depth in DEPTHS:
            for i in range(first, first + per_cell):
                key = rng.randint(10000, 99999)
                start = rng.randrange(0, len(text) - size)
                hay = text[start:start + size]
                needle = f" The pass key is {key}. Remember it. {key} is the pass key. "
                at = {"start": 0, "middle": len(hay) // 2, "end": len(hay)}[depth]
                rows.append({"id": f"{bucket}-{depth}-{i}",
                             "context": hay[:at] + needle + hay[at:], "answer": key,
                             "slices": [bucket, f"depth-{depth}"]})
    return rows


def main() -> None:
    text = filler_text()
    # The first seed's stream is consumed exactly as version 1 did, so its 36 items keep
    # their ids and text; the added ones come from a stream of their own.
    rows = (cells(random.Random(20261129), PER_CELL, 0, text)
            + cells(random.Random(20261202), MORE_PER_CELL, PER_CELL, text))
    (HERE / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} items")


if __name__ == "__main__":
    main()
