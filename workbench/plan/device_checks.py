"""Whether this host can run the run as configured, device by device: the engine build the
setup installed against the device that answers, the quantiser's accelerator against the
engine's, the engine's dtype and batch-invariant kernels against the GPU's compute
capability. Each is a one-line problem naming both sides (exit 2 before anything starts:
docs/scale.md, "Device checks")."""

from __future__ import annotations

from workbench.config.run_config import RunConfig
from workbench.quantize.checks import gpu_capability, quantiser_device_problem
from workbench.quantize.gpu_rules import dtype_reason
from workbench.serve.build import build_mismatch, engine_build
from workbench.serve.device import device_facts

__all__ = ["device_problems"]


def device_problems(cfg: RunConfig, device: str, serving: bool, quantising: bool
                    ) -> list[str]:
    """serving: engines start here; quantising: a candidate is built here."""
    problems = []
    if serving:
        problems += _engine_problems(cfg, device)
    if quantising and (problem := quantiser_device_problem(device)):
        problems.append(problem)
    return problems


def _engine_problems(cfg: RunConfig, device: str) -> list[str]:
    problems = []
    if mismatch := build_mismatch(device, engine_build()):
        problems.append(mismatch)
    if reason := dtype_reason(cfg.engine.dtype, gpu_capability(device)):
        problems.append(f"{cfg.source}: {reason}")
    if cfg.engine.batch_invariant == "on":
        facts = device_facts(device, cfg.engine)
        if not facts.batch_invariant:
            problems.append(f"{cfg.source}: engine.batch_invariant: on, but "
                            f"{facts.batch_invariant_why}; use auto or off here")
    return problems
