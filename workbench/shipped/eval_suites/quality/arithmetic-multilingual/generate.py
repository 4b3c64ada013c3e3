"""Regenerate items.jsonl: the same arithmetic questions asked in ten languages.

Run from anywhere: ``python eval_suites/quality/arithmetic-multilingual/generate.py``.
Every language gets the same 12 operand pairs (seeded), so the language is the only thing
that varies between slices: a candidate that keeps English and loses Russian shows it here.
The question templates were written for this suite (Apache-2.0, like the generator).
"""

import json
import random
from pathlib import Path

TEMPLATES = {
    "en": "What is {a} {op} {b}? Reply with the number only.",
    "de": "Wie viel ist {a} {op} {b}? Antworte nur mit der Zahl.",
    "fr": "Combien font {a} {op} {b} ? Réponds uniquement par le nombre.",
    "es": "¿Cuánto es {a} {op} {b}? Responde solo con el número.",
    "it": "Quanto fa {a} {op} {b}? Rispondi solo con il numero.",
    "pt": "Quanto é {a} {op} {b}? Responda apenas com o número.",
    "nl": "Hoeveel is {a} {op} {b}? Antwoord alleen met het getal.",
    "ru": "Сколько будет {a} {op} {b}? Ответь только числом.",
    "zh": "{a} {op} {b} 等于多少？只回答数字。",
    "ja": "{a} {op} {b} はいくつですか？数字だけで答えてください。",
}
OPS = {"addition": ("+", lambda a, b: a + b), "subtraction": ("-", lambda a, b: a - b),
       "multiplication": ("*", lambda a, b: a * b)}
SIZES = {"one-digit": (1, 9), "two-digit": (10, 99)}
PER_CELL = 2        # version 1's 12 pairs, from the first seed: ids -00 to -11
MORE_PER_CELL = 8   # version 2's 48 more, from a second seed: 600 items, because answers
                    # this fragile churn 7-15% between sessions and 120 could not resolve a
                    # 0.05 margin (docs/gates.md, "Evidence strength")


def drawn_pairs(rng: random.Random, per_cell: int, taken: list[tuple[str, str, int, int]]
                ) -> list[tuple[str, str, int, int]]:
    """per_cell pairs in each (operation, size) cell, none already in `taken` (version 1's
    draw happened to have none; a repeat would count one question twice)."""
    pairs: list[tuple[str, str, int, int]] = []
    for op_name in OPS:
        for size_name, (lo, hi) in SIZES.items():
            drawn = 0
            while drawn < per_cell:
                a, b = sorted((rng.randint(lo, hi), rng.randint(lo, hi)), reverse=True)
                pair = (op_name, size_name, a, b)  # a >= b: no negative answers
                if pair not in taken and pair not in pairs:
                    pairs.append(pair)
                    drawn += 1
    return pairs


def operand_pairs() -> list[tuple[str, str, int, int]]:
    first = drawn_pairs(random.Random(20261129), PER_CELL, [])
    return first + drawn_pairs(random.Random(20261202), MORE_PER_CELL, first)


def main() -> None:
    rows = []
    for lang, template in TEMPLATES.items():
        for i, (op_name, size_name, a, b) in enumerate(operand_pairs()):
            symbol, fn = OPS[op_name]
            rows.append({"id": f"{lang}-{i:02d}", "question": template.format(a=a, op=symbol, b=b),
                         "answer": fn(a, b), "slices": [f"lang:{lang}", op_name, size_name]})
    out = Path(__file__).with_name("items.jsonl")
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} items to {out}")


if __name__ == "__main__":
    main()
