"""Two decision records compared field by field, times, paths and run ids aside: what a
change of the workbench's code changed in what it records. Used to check that a
restructuring keeps the record (docs/benchmarks.md, issue 21):

    python benchmarks/record_diff.py OLD/decision.json NEW/decision.json

Prints every differing field (dotted path, old -> new) and exits 0 when only the allowed
fields differ.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# Fields that are about when and where a run happened, not what it measured or decided.
VOLATILE = re.compile(r"(^|\.)(created_at|run_dir|mlflow|wall_time_s|started_at|ended_at|"
                      r"items_file|raw_file|log_file|path|candidate_path|model_dir|"
                      r"logged_later|ui)(\.|$)|^plots|command")


def flatten(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}"))
        return out or {prefix: []}
    return {prefix: value}


def main() -> int:
    old, new = (flatten(json.loads(Path(p).read_text())) for p in sys.argv[1:3])
    differ = sorted(k for k in old.keys() | new.keys()
                    if old.get(k, "<absent>") != new.get(k, "<absent>") and not VOLATILE.search(k))
    for key in differ:
        print(f"{key}: {old.get(key, '<absent>')!r} -> {new.get(key, '<absent>')!r}")
    print(f"{len(differ)} differing fields of {len(old.keys() | new.keys())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
