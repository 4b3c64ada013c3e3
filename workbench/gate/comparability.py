"""Only the candidate differs: what else could make baseline and candidate answer
differently is stated for both sides and compared (docs/gates.md, "Only the candidate
differs").

Checked: the chat template, the tokenizer and the generation defaults of the served
folders (digests), the engine's version, the device (the GPU type on a GPU host), the
suites' requests in flight and batch-invariant kernels, every engine argument except the
session's own (model folder, served name, port) and those the candidate sets (its serve
args), and each suite's digest. Stated: the prefix cache when each session began. Sampling
and seeds are one block for both sides (the record's `sampling`, part of the baseline's
cache key), so they cannot differ. A difference the config did not ask for fails the
`comparability` gate, naming it; a fact a side did not record fails it closed.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from workbench.gate.evidence import GateId, GateOutcome
from workbench.serve.device import command_dtype
from workbench.serve.engine import ServerInfo
from workbench.suites.results import SuiteResult

__all__ = ["ComparabilityCheck", "ComparabilitySection", "comparability", "device_facts_of",
           "shared_args"]

# engine arguments that name the session, not the model's serving: they differ by design
_SESSION_ARGS = ("--model", "--served-model-name", "--port")
MODEL_FILES = ("chat_template", "tokenizer", "generation_config")


class ComparabilityCheck(TypedDict):
    what: str
    baseline: str
    candidate: str
    same: bool
    note: str  # why a difference is allowed, or why it could not be checked


class ComparabilitySection(TypedDict):
    checks: list[ComparabilityCheck]
    prefix_cache_at_start: dict[str, str]  # role -> the cache when its session began
    candidate_args: list[str]  # the engine arguments the candidate alone was given


def shared_args(info: ServerInfo) -> list[str]:
    """The engine arguments both models should share: the command after the interpreter,
    without the session's own arguments and without the ones this model alone was given
    (engine_command appends those last)."""
    command = list(info.command)
    own = list(info.own_args)
    if own and command[-len(own):] == own:
        command = command[:-len(own)]
    if "-m" in command:
        command = command[command.index("-m") + 2:]  # python -m <module>
    out, skip = [], False
    for arg in command:
        if skip:
            skip = False
            continue
        if arg in _SESSION_ARGS:
            skip = True
            continue
        out.append(arg)
    return out


NOT_RECORDED = "not recorded"


def _check(what: str, base: str, cand: str, note: str = "") -> ComparabilityCheck:
    """Same only when both sides recorded it and agree: a fact neither recorded is no
    evidence that they match (fail closed)."""
    return ComparabilityCheck(what=what, baseline=base, candidate=cand,
                              same=base == cand and NOT_RECORDED not in (base, cand),
                              note=note)


def _file_checks(base: ServerInfo, cand: ServerInfo) -> list[ComparabilityCheck]:
    out = []
    for what in MODEL_FILES:
        b, c = base.model_files.get(what, ""), cand.model_files.get(what, "")
        if base.endpoint or cand.endpoint:
            side = "baseline" if base.endpoint else "candidate"
            out.append(_check(what, b or "?", c or "?", f"the {side} is an endpoint: its "
                              "files are not here (not checked)"))
            out[-1]["same"] = True
        else:
            out.append(_check(what, b or NOT_RECORDED, c or NOT_RECORDED))
    return out


def _cache_check(base: ServerInfo, cand: ServerInfo) -> ComparabilityCheck:
    """Both sessions start with an empty prefix cache (new engine processes); a warm cache
    on one side only would flatter its latency (vLLM PR #53920). An endpoint's state is
    unknown: stated, and allowed, since the config chose the endpoint."""
    b = base.prefix_cache_at_start or NOT_RECORDED
    c = cand.prefix_cache_at_start or NOT_RECORDED
    check = _check("prefix cache at start", b, c)
    if base.endpoint or cand.endpoint:
        check["same"] = NOT_RECORDED not in (b, c)
        check["note"] = "an endpoint: its cache state is its own (the config chose it)"
    return check


def _device_checks(base: ServerInfo, cand: ServerInfo) -> list[ComparabilityCheck]:
    """The device both sides ran on, the suites' batch, batch-invariant kernels, the
    serving dtype and the engine's platform: a baseline measured on another GPU type, at
    another batch, in bf16 beside a float32 candidate or on another platform answers
    differently for reasons that are not the candidate's (serve/device.py)."""
    b, c = device_facts_of(base), device_facts_of(cand)
    checks = [_check(what, b[key], c[key]) for what, key in (
        ("device", "device"), ("suite requests in flight", "suite_in_flight"),
        ("batch-invariant kernels", "batch_invariant"), ("serving dtype", "serve_dtype"),
        ("engine platform", "platform"), ("suites' cores", "binding"))]
    if base.endpoint or cand.endpoint:
        for check in checks:
            if check["what"] != "suite requests in flight":
                check["same"] = True
                check["note"] = ("an endpoint: its device and kernels are its own "
                                 "(the config chose it)")
    return checks


def device_facts_of(info: ServerInfo) -> dict[str, str]:
    """The device facts a side recorded as text; a measurement made before they were
    recorded ran at the eight requests in flight the workbench always used then, without
    batch-invariant kernels, on the device it names."""
    facts = info.device_facts
    gpus = (facts.get("gpus") or {}).get("gpus") or []
    if gpus:
        names = sorted({f"{g['name']} (compute capability {g['compute_capability']}"
                        + (f", MIG {g['mig_profile']}" if g.get("mig_profile") else "") + ")"
                        for g in gpus})
        device = f"{len(gpus)} x {', '.join(names)}"
    else:
        device = "an endpoint (not visible here)" if info.endpoint else info.device
    return {"device": device, "suite_in_flight": str(facts.get("suite_in_flight", 8)),
            "batch_invariant": "on" if facts.get("batch_invariant") else "off",
            # measured before `engine.dtype: auto`: the engine command says, else bf16
            "serve_dtype": str(facts.get("serve_dtype") or command_dtype(info.command)),
            # vLLM's own choice, as its log said it (serve/engine_log.py): AMD Zen's, or
            # its default for the device; a baseline cached before zentorch was installed
            # ran on another platform than a candidate served after
            "platform": info.kernels.get("platform", "default"),
            # the cores the suites computed on (measure/sessions.py); vLLM's own binding in
            # measurements made before the suites could have every core
            "binding": str(facts.get("binding", "vllm"))}


def comparability(base: ServerInfo | None, cand: ServerInfo | None,
                  base_suites: dict[str, SuiteResult], cand_suites: dict[str, SuiteResult]
                  ) -> tuple[ComparabilitySection, GateOutcome]:
    """The section the record keeps and the gate that judges it."""
    name = GateId("comparability")
    empty = ComparabilitySection(checks=[], prefix_cache_at_start={}, candidate_args=[])
    if base is None or cand is None:
        return empty, GateOutcome.of(name, "fail", "a side's server facts are missing (fail "
                                     "closed)")
    checks = _file_checks(base, cand)
    checks.append(_cache_check(base, cand))
    checks.append(_check("engine version", base.version, cand.version))
    checks += _device_checks(base, cand)
    if base.endpoint or cand.endpoint:
        checks.append(_check("engine arguments", "", "", "an endpoint: its arguments are "
                             "its own (the config chose it)"))
    else:
        b, c = shared_args(base), shared_args(cand)
        checks.append(_check("engine arguments", " ".join(b), " ".join(c)))
    for suite in sorted(base_suites.keys() & cand_suites.keys()):
        checks.append(_check(f"suite {suite}", base_suites[suite].digest,
                             cand_suites[suite].digest))
    section = ComparabilitySection(
        checks=checks, candidate_args=list(cand.own_args),
        prefix_cache_at_start={"baseline": base.prefix_cache_at_start or NOT_RECORDED,
                               "candidate": cand.prefix_cache_at_start or NOT_RECORDED})
    differ = [c for c in checks if not c["same"]]
    if differ:
        detail = "; ".join(_difference(c) for c in differ)
        unrecorded = any(NOT_RECORDED in (c["baseline"], c["candidate"]) for c in differ)
        why = (" — recorded before comparability checks existed: measure again" if unrecorded
               else ": only the candidate may differ (docs/gates.md)")
        return section, GateOutcome.of(name, "fail", detail + why, evidence=dict(section))
    args = " ".join(cand.own_args) or "none"
    named = [c["what"] for c in checks if not c["what"].startswith("suite ")]
    detail = (f"the same on both sides: {', '.join(named)} and {len(checks) - len(named)} "
              f"suite digests; the candidate's own engine arguments: {args}")
    return section, GateOutcome.of(name, "pass", detail, evidence=dict(section))


def _difference(check: ComparabilityCheck) -> str:
    b, c = check["baseline"], check["candidate"]
    if check["what"] == "engine arguments":
        only_b = [a for a in b.split() if a not in c.split()]
        only_c = [a for a in c.split() if a not in b.split()]
        return (f"engine arguments differ (baseline only: {' '.join(only_b) or '-'}; "
                f"candidate only: {' '.join(only_c) or '-'})")
    return f"{check['what']} differs ({_short(b)} vs {_short(c)})"


def _short(value: str) -> str:
    return value[:12] if len(value) == 64 else (value[:80] + "…" if len(value) > 80 else value)
