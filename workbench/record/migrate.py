"""Records of every schema this project has released, brought to the current one, one step
per version, so that `workbench gate` can judge a stored run again after an upgrade.

Each step adds what its version introduced, with the value that says "not recorded"; none
invents evidence. What a migrated record lacks, the re-judged gates that need it fail
closed and name (a measurement without server facts fails `comparability`, one without
health checks fails the health gates). A record is first checked against the schema it
was written under (record/decision-v<N>.schema.json), then migrated.
"""

from __future__ import annotations

from collections.abc import Callable

from workbench.gate.evidence import GateId
from workbench.gate.looks import one_look
from workbench.serve.device import command_dtype

__all__ = ["FIRST_VERSION", "migrate"]

FIRST_VERSION = 2  # the first record with a published schema


def _v2_to_v3(record: dict) -> dict:
    # 3 typed every section below the top level; their contents were already these
    return record


def _v3_to_v4(record: dict) -> dict:
    record.setdefault("endpoints", {})  # 4: sides served at an endpoint (none before)
    return record


def _v4_to_v5(record: dict) -> dict:
    for gate in record.get("gates", []):  # 5: each gate's id by its parts
        if gate.get("id") is None:
            gate["id"] = vars(GateId.parse(gate["gate"]))
    return record


def _v5_to_v6(record: dict) -> dict:
    for gate in record.get("gates", []):
        gate.setdefault("baseline_status", None)
        gate.setdefault("informational", False)
    policy = record.get("policy") or {}
    if policy:
        policy.setdefault("tests", policy.get("paired_tests", 0))
        for key in ("baseline_misses", "baseline_unproven", "informational"):
            policy.setdefault(key, [])
        policy.setdefault("coverage", {})
    record.setdefault("comparability", {"checks": [], "prefix_cache_at_start": {},
                                        "candidate_args": []})
    return record


def _v6_to_v7(record: dict) -> dict:
    policy = record.get("policy") or {}
    if policy:  # 7: how many looks; every run before it looked once, at the policy's level
        profile = (record.get("sampling") or {}).get("profile", "")
        policy.setdefault("looks", one_look(policy.get("confidence", 0.95), 1, profile))
    return record


def _v7_to_v8(record: dict) -> dict:
    if record.get("sampling"):  # 8: a half of the items (tune); every run before judged all
        record["sampling"].setdefault("split", None)
    return record


def _v8_to_v9(record: dict) -> dict:
    for load in (record.get("load") or {}).values():  # 9: telemetry and saturation per level
        for result in [load, *load.get("rounds", [])]:
            for level in result.get("levels", []):
                level.setdefault("telemetry", {})  # not recorded
                level.setdefault("saturation", {})
    return record


def _v9_to_v10(record: dict) -> dict:
    device = record.get("device")
    if device:  # 10: the GPUs, the suites' batch and batch-invariant kernels
        device.setdefault("gpus", None)  # not recorded (no GPU run was, before)
        device.setdefault("suite_in_flight", 8)  # every run before used eight
        device.setdefault("batch_invariant", "off (recorded before it could be on)")
    return record


def _v10_to_v11(record: dict) -> dict:
    device = record.get("device")
    if device:  # 11: the serving dtype, read from the engine command when it is there
        device.setdefault("serve_dtype", command_dtype(
            (record.get("engine") or {}).get("candidate_command") or []))
        device.setdefault("native_bf16", False)  # not probed then: not claimed
    quant = record.get("quantization")
    if quant and quant.get("source") == "built":  # every build before computed in bf16
        quant.setdefault("compute_dtype", "bfloat16")
        quant.setdefault("stored_dtype", "bfloat16")
    record.setdefault("stand_in", None)  # none was made before
    return record


def _v11_to_v12(record: dict) -> dict:
    # 12: the registry's champion before the run and the engine's batch are not known for
    # an older record, and left out rather than claimed (decision.md says so); no Rollout
    # section was written
    record.setdefault("rollout", None)
    return record


def _v12_to_v13(record: dict) -> dict:
    # 13: no run before it was stopped early: every one was measured in full
    record.setdefault("early_stop", None)
    return record


def _v13_to_v14(record: dict) -> dict:
    # 14: no candidate was served dense before (int4 on AVX2 had a W8A8 stand-in, stand_in)
    record.setdefault("served_dense", None)
    return record


def _v14_to_v15(record: dict) -> dict:
    # 15: no judge model read a traffic suite before
    record.setdefault("judge", None)
    return record


def _v15_to_v16(record: dict) -> dict:
    # 16: every CPU run's suites computed on vLLM's binding before; an older record does
    # not say so, and is left as it was rather than claimed
    return record


# version -> the step that brings a record of that version to the next
STEPS: dict[int, Callable[[dict], dict]] = {2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5,
                                            5: _v5_to_v6, 6: _v6_to_v7, 7: _v7_to_v8,
                                            8: _v8_to_v9, 9: _v9_to_v10, 10: _v10_to_v11,
                                            11: _v11_to_v12, 12: _v12_to_v13,
                                            13: _v13_to_v14, 14: _v14_to_v15,
                                            15: _v15_to_v16}


def migrate(record: dict, current: int) -> tuple[dict, list[int]]:
    """The record in the current schema, and the versions it passed through."""
    version = int(record.get("schema_version", current))
    passed = []
    while version < current:
        record = STEPS[version](record)
        passed.append(version)
        version += 1
    record["schema_version"] = current
    return record, passed
