"""Which cheap signal predicts a tune's verdicts (issue 47, item 4): each proxy's AUC over
the trials of one tune (tune/proxies.py), from the trials' own decision records.

    .venv/bin/python benchmarks/tune_proxies.py runs/<time>-tune-int4 [--out FILE]

Prints each trial's proxies and decision, then each proxy's AUC (the chance a promoted
trial's value is lower than a rejected one's; None where every trial decided alike).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.tune.proxies import proxy_fits, trial_proxies  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tune_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    tune = json.loads((args.tune_dir / "tune.json").read_text())
    trials = []
    for row in tune["trials"]["rows"]:
        record = Path(row.get("run_dir") or "") / "decision.json"
        if row.get("status") != "decided" or not record.is_file():
            continue
        proxies = trial_proxies(json.loads(record.read_text()))
        passed = (row.get("decision_here") or row.get("decision")) == "promote"
        trials.append((proxies, passed))
        print(f"{row['candidate']:<32} {'promote' if passed else row.get('decision'):<12} "
              + "  ".join(f"{k} {v:.4g}" for k, v in proxies.items()))
    fits = proxy_fits(trials)
    for fit in fits:
        print(f"{fit.proxy:<18} trials {fit.trials:>3}  promoted {fit.promoted:>3}  "
              f"AUC {'-' if fit.auc is None else f'{fit.auc:.2f}'}")
    if args.out:
        args.out.write_text(json.dumps([fit.__dict__ for fit in fits], indent=2))


if __name__ == "__main__":
    main()
