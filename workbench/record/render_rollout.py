"""decision.md's lines on rolling the candidate out and back (docs/rollout.md)."""

from __future__ import annotations

from workbench.record.canary import CANARY_FILE, canary_rules
from workbench.record.decision import DecisionRecord
from workbench.record.sections import CHAMPION, PREVIOUS_CHAMPION, Registry, RolloutSection

__all__ = ["registry_lines", "rollout_lines", "trigger_lines"]

# the twelve fields' names as decision.md shows them
_TITLES = {"workload": "Workload", "quality_threshold": "Quality threshold",
           "model_and_precision": "Model and precision",
           "device_and_replicas": "Device and replicas", "batching": "Batching",
           "cache": "Cache", "routing_and_fallback": "Routing and fallback", "slo": "SLO",
           "cost_formula": "Cost", "security": "Security", "telemetry": "Telemetry",
           "rollback_trigger": "Rollback trigger"}


def registry_lines(registry: Registry | None) -> list[str]:
    """Which registered version now holds `champion`, and what a rollback returns to: the
    version a promotion replaced (kept under `previous-champion`), or, when the candidate
    was not promoted, the champion that stays. Nothing for a sweep's child (the sweep
    moves its own alias) or a run not registered."""
    if not registry or not registry["alias"]:
        return []
    model, version = registry["registered_model"], registry["version"]
    line = f"Registry: `{model}` version {version} is now `{registry['alias']}`"
    if "champion_before" not in registry:  # a record from before schema 12
        return [line + ".", ""]
    before = registry["champion_before"]
    if registry["alias"] == CHAMPION:
        back = (f"roll back to version {before} (alias `{PREVIOUS_CHAMPION}`)" if before
                else "no earlier champion to roll back to")
    else:
        back = (f"version {before} stays `{CHAMPION}`" if before
                else f"no version holds `{CHAMPION}`")
    return [f"{line}; {back}.", ""]


def trigger_lines(rec: DecisionRecord) -> list[str]:
    """The rollback trigger in words: the rules of canary-rules.yaml, each with where its
    threshold came from."""
    rules = canary_rules(rec)
    own = (rec.load.get("candidate") or {}).get("name", "")
    classes = (f" Their latency thresholds come from the run's own load profile `{own}`: "
               "vLLM's metrics do not tell one class of traffic from another, so a "
               "deployment serving several classes alerts on the one it is judged by "
               "(docs/rollout.md)." if rec.further_load else "")
    return ["", f"## Rollback trigger (`{CANARY_FILE}`)", "",
            "Alerting rules for a canary of this candidate over vLLM's own metrics; a page "
            f"means roll back (docs/rollout.md).{classes}", "", *[
                f"- **{r.alert}** ({r.severity}): {r.summary}; threshold from {r.source}."
                for r in rules]]


def rollout_lines(rollout: RolloutSection | None) -> list[str]:
    """The Rollout section as a table: what a team ships and pulls back by, and where each
    line came from (measured, the config, the team's `rollout:` section, or nothing)."""
    if not rollout:
        return []
    lines = ["", "## Rollout", "", "| | | from |", "|---|---|---|"]
    lines += [f"| {_TITLES.get(key, key)} | {f['text']} | {f['source']} |"
              for key, f in rollout["fields"].items()]
    return lines
