"""Build example-traffic: a team's traffic as the workbench reads it (issue 49), from data
this repository already ships, so that `workbench evaluate` can be tried on traffic with
no file of one's own.

    python eval_suites/traffic/build_example.py

Six segments (`task`), with the language of the expected answer (`lang`):
- support (40): a parcel service's customer questions, written here from templates, all
  under one shared system prompt (as a product's traffic is: a shared prefix);
- extraction (40): a bfcl-simple question whose call arguments are asked for as JSON
  under the function's parameter schema (`response_format: json_schema`);
- tools (40): other bfcl-simple questions, with the function offered as a tool;
- summary (40): a passage of the held-out Shakespeare and Milton, to summarise;
- code (40): a held-out Python, C++, Rust, Go, TypeScript, Java, SQL, Bash or Haskell
  passage, to explain;
- multilingual (36): a held-out passage in one of twelve languages, to summarise in it.
Held-out passages only (calibration_data/heldout.jsonl): none was seen by the quantiser.
The same inputs give the same file, byte for byte (no randomness beyond a fixed seed).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from workbench.mechanisms.jsonl import jsonl_lines

SHIPPED = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent / "example-traffic"
SEED = 49
SUPPORT_SYSTEM = ("You are the customer assistant of Northwind Parcels. Answer in two or "
                  "three friendly sentences; never promise a refund amount.")
PARCELS = ["a birthday present", "a laptop", "two pairs of shoes", "a box of books",
           "a replacement phone screen", "medicine for my mother", "a wedding dress",
           "camping gear"]
ISSUES = ["has not arrived after ten days", "shows as delivered but is not here",
          "arrived with the box crushed", "was sent to my old address",
          "is stuck at the depot since Monday", "needs to be redirected to my office",
          "came without the invoice", "should be held until I am back from holiday",
          "was left with a neighbour I do not know", "is charged twice on my card"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in jsonl_lines(path) if line.strip()]


def support(rng: random.Random) -> list[dict]:
    pairs = [(p, i) for p in PARCELS for i in ISSUES]
    rng.shuffle(pairs)
    return [{"id": f"support-{k:03d}", "messages": [
                {"role": "system", "content": SUPPORT_SYSTEM},
                {"role": "user", "content": f"Hello, my parcel with {parcel} {issue}. "
                                            "What can I do?"}],
             "max_tokens": 96, "segments": {"task": "support", "lang": "eng"}}
            for k, (parcel, issue) in enumerate(pairs[:40])]


def bfcl(rng: random.Random) -> tuple[list[dict], list[dict]]:
    rows = _rows(SHIPPED / "eval_suites/structured/bfcl-simple/items.jsonl")
    rng.shuffle(rows)
    extraction, tools = [], []
    for row in rows[:40]:
        fn = json.loads(row["function"])
        extraction.append({"id": f"extraction-{row['id']}", "messages": [{
            "role": "user", "content": f"Give the arguments of the function {fn['name']} "
                                       f"for this request, as JSON: {row['question']}"}],
            "max_tokens": 96, "response_format": {"type": "json_schema", "json_schema": {
                "name": fn["name"], "schema": fn["parameters"]}},
            "segments": {"task": "extraction", "lang": "eng"}})
    for row in rows[40:80]:
        fn = json.loads(row["function"])
        tools.append({"id": f"tools-{row['id']}", "messages": [
            {"role": "user", "content": row["question"]}], "max_tokens": 96,
            "tools": [{"type": "function", "function": fn}],
            "segments": {"task": "tools", "lang": "eng"}})
    return extraction, tools


def heldout(rng: random.Random) -> list[dict]:
    rows = _rows(SHIPPED / "calibration_data/heldout.jsonl")
    # a passage short enough to fit a 2,048-token context with its answer (two verse
    # passages of Paradise Regained run to thousands of tokens)
    prose = [r for r in rows if r["domain"] in ("drama", "verse") and len(r["text"]) <= 1600]
    code = [r for r in rows if r["domain"].startswith("code:")]
    langs = [r for r in rows if r["domain"].startswith("language:")]
    rng.shuffle(prose)
    rng.shuffle(code)
    out = [{"id": f"summary-{r['id']}", "messages": [{"role": "user", "content":
            f"Summarise this passage in two sentences:\n\n{r['text']}"}], "max_tokens": 96,
            "segments": {"task": "summary", "lang": "eng"}} for r in prose[:40]]
    out += [{"id": f"code-{r['id']}", "messages": [{"role": "user", "content":
             f"Explain briefly what this code does:\n\n{r['text']}"}], "max_tokens": 96,
             "segments": {"task": "code", "lang": "eng"}} for r in code[:40]]
    out += [{"id": f"multilingual-{r['id']}", "messages": [{"role": "user", "content":
             "Summarise this passage in two sentences, in the language it is written "
             f"in:\n\n{r['text']}"}], "max_tokens": 96,
             "segments": {"task": "multilingual", "lang": r["domain"].split(":", 1)[1]}}
            for r in langs]
    return out


def main() -> None:
    rng = random.Random(SEED)
    extraction, tools = bfcl(rng)
    requests = support(rng) + extraction + tools + heldout(rng)
    HERE.mkdir(exist_ok=True)
    with (HERE / "requests.jsonl").open("w") as out:
        for r in requests:
            out.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"{len(requests)} requests written to {HERE / 'requests.jsonl'}")


if __name__ == "__main__":
    main()
