"""The walk's ranking of points of equal size (tune/run.py, _by_perplexity) through the real
quantiser, no engine: on the fragile tiny Llama, the GPTQ and round-to-nearest points of
group 64 (the same estimated size) are both built, each with its held-out perplexity ratio
from its build, ordered lowest first, recorded where tune.json reads them, and found again
in the cache by their own trials."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from quantised import FRAGILE_KL_GATE, fragile_config
from rich.console import Console

from workbench.config.run_config import load_config
from workbench.pipeline.quantize import quantize_planned
from workbench.plan.plan import Outputs, plan
from workbench.suites.split import ItemSplit
from workbench.tune.run import _by_perplexity
from workbench.tune.space import points
from workbench.tune.trials import point_spec, trial_config
from workbench.tune.walk import equal_size_run

pytestmark = pytest.mark.integration

SPACE = """
tune:
  space: {methods: [gptq, rtn], symmetric: [true], group_sizes: [64]}
"""


def test_points_of_equal_size_are_built_and_ordered_by_their_perplexity(
        fragile_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gates.yaml").write_text(FRAGILE_KL_GATE)
    (tmp_path / "c.yaml").write_text(fragile_config(fragile_model, "smoke", "rank") + SPACE)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(tmp_path / "c.yaml")
    p = plan(cfg, "int4", Outputs(runs_dir=tmp_path / "runs"))
    assert cfg.tune.space is not None
    pts, _ = points("int4", p.candidate, cfg.tune.space, p.model_dir, p.device, None)
    specs = [point_spec(pt) for pt in pts]
    assert [s.name for s in specs] == ["int4", "int4-rtn-sym-g64"]
    assert equal_size_run(specs, 0) == 2  # one size: a run the walk ranks

    ratios: dict[str, float | None] = {}
    console = Console(file=open(os.devnull, "w"), width=200)
    ordered = _by_perplexity(p, tmp_path / "tune", console, ratios, specs)

    assert set(ratios) == {"int4", "int4-rtn-sym-g64"}
    values = [ratios[s.name] for s in ordered]
    assert all(isinstance(v, float) and v > 0 for v in values), ratios
    assert values == sorted(values)  # type: ignore[type-var]
    assert ratios["int4"] != ratios["int4-rtn-sym-g64"]  # two recipes, two builds
    for s in specs:
        assert (tmp_path / "tune" / "builds" / s.name / "quantize.json").is_file()
        trial = p.variant(trial_config(cfg, s), s.name, ItemSplit("search", cfg.seed))
        again = quantize_planned(trial, tmp_path / "tune" / "builds" / s.name, console)
        assert again.cache_hit, s.name  # the trial finds the ranking's build
