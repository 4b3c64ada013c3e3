"""The `rollout:` section: what only the team knows about serving a candidate (its peak
traffic, how requests reach it and where they go when it fails, its security controls,
where its telemetry goes, how fast it must be recoverable). Every field is optional; the
record says "not declared" for what is missing (docs/rollout.md)."""

from __future__ import annotations

from pydantic import Field

from workbench.mechanisms.yaml_io import StrictModel

__all__ = ["RolloutConfig"]


class RolloutConfig(StrictModel):
    peak_requests_per_s: float | None = Field(
        default=None, gt=0,
        description="Declared peak traffic, at the load profile's request lengths")
    routing: str | None = Field(default=None, min_length=1,
                                description="How traffic reaches the candidate (canary steps)")
    fallback: str | None = Field(default=None, min_length=1,
                                 description="Where requests go when the candidate fails")
    security: list[str] = Field(default_factory=list,
                                description="Controls in front of the deployment")
    telemetry: str | None = Field(default=None, min_length=1,
                                  description="Where the canary's metrics and logs go")
    recovery_objective: str | None = Field(default=None, min_length=1,
                                           description="How fast a rollback must complete")
