"""Layer sensitivity through the real quantiser environment, on a model whose fragile
block is known: it must rank first, by a wide margin, and a second call measures nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from quantised import FRAGILE_BLOCK

from workbench.config.run_config import load_config
from workbench.mechanisms.digests import folder_digest
from workbench.mechanisms.errors import InputError
from workbench.quantize.sensitivity import keep_blocks_ignore, measure_sensitivity

pytestmark = pytest.mark.integration

CONFIG = """\
model: {{name: fragile, path: {model}}}
candidates:
  int4: {{recipe: w4a16, group_size: 64}}
  fp8: {{recipe: fp8-dynamic}}
calibration:
  files: [{repo}/calibration_data/shakespeare_milton.jsonl]
  heldout: [{repo}/calibration_data/heldout.jsonl]
  num_samples: 8
  seq_len: 128
  heldout_samples: 8
engine: {{max_model_len: 512}}
suites: [arithmetic]
load:
  profile: tiny
  profiles:
    tiny: {{concurrency: [1], num_prompts: 4, prompt_tokens: 32, output_tokens: 8}}
gates: {repo}/configs/gates/default.yaml
"""
REPO = Path(__file__).resolve().parents[2]


def test_the_fragile_block_ranks_first_and_is_measured_once(fragile_model: Path,
                                                            tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG.format(model=fragile_model, repo=REPO))
    cfg = load_config(tmp_path / "c.yaml")
    digest = folder_digest(fragile_model)
    first = measure_sensitivity(cfg, "int4", cfg.candidates["int4"], fragile_model, digest,
                                tmp_path / "first")
    assert not first.cache_hit and len(first.blocks) == 4
    assert first.ranked()[0] == FRAGILE_BLOCK
    scores = {b.block: b.kl_mean for b in first.blocks}
    others = max(v for k, v in scores.items() if k != FRAGILE_BLOCK)
    assert scores[FRAGILE_BLOCK] > 3 * others > 0
    assert json.loads((tmp_path / "first" / "sensitivity.json").read_text())["blocks"]

    again = measure_sensitivity(cfg, "int4", cfg.candidates["int4"], fragile_model, digest,
                                tmp_path / "again")
    assert again.cache_hit and again.ranked() == first.ranked()
    assert not (tmp_path / "again" / "sensitivity.log").exists()  # no worker started

    entry = keep_blocks_ignore(first.ranked()[:1])
    assert entry is not None  # llm-compressor matches "re:" entries against module names
    assert [b for b in range(4) if re.match(entry[3:], f"model.layers.{b}.mlp.down_proj")] \
        == [FRAGILE_BLOCK]
    with pytest.raises(InputError, match="candidates.fp8: layer sensitivity needs"):
        measure_sensitivity(cfg, "fp8", cfg.candidates["fp8"], fragile_model, digest,
                            tmp_path / "fp8")
