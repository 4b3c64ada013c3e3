"""A team's own traffic as a suite (issue 49, step 1: the reader): a JSONL file of requests,
each answered by both models with its own parameters and compared item by item, per
segment, with no reference answer.

A line is one request, in any of three forms:
- an item: `messages` (chat) or `prompt` (one user turn), optional `max_tokens`,
  `temperature`, `n`, `response_format`, `tools`, an `id` and `segments` ({key: label});
- an OpenAI chat-completions request body, as a request log keeps it: `messages`,
  `max_tokens` or `max_completion_tokens`, `temperature`, `n`, `response_format`, `tools`,
  and its `metadata` ({key: label}) as the segments;
- an OpenAI Batch API line: `custom_id` (the id) and `body` (a request body as above).
A `timestamp` (seconds, or an ISO 8601 time) beside any of them is kept for the load test.

Every problem is reported at once, each naming the file, the line and the field, and never
the text of a prompt: a team's prompts are data it may not want copied (docs/privacy.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema

from workbench.mechanisms.errors import InputError
from workbench.mechanisms.jsonl import jsonl_lines

__all__ = ["Traffic", "TrafficRequest", "last_user_text", "read_traffic", "redact_secrets",
           "secret_kinds"]

ROLES = ("system", "developer", "user", "assistant", "tool")
# Shapes of credentials a prompt may carry by mistake, found so that they are never written
# anywhere (the providers' documented prefixes: OpenAI `sk-`, AWS access key ids `AKIA`,
# GitHub tokens `ghp_`/`gho_`/`ghs_`/`github_pat_`, Slack `xox?-`, and a bearer header)
SECRET_PATTERNS = {
    "openai-key": re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}"),
    "aws-access-key-id": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "github-token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    "slack-token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    "bearer-token": re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{20,}"),
}


def secret_kinds(text: str) -> list[str]:
    """The kinds of credential-shaped strings in a text (none: [])."""
    return [kind for kind, pattern in SECRET_PATTERNS.items() if pattern.search(text)]


def redact_secrets(text: str) -> str:
    """The text with every credential-shaped string replaced by its kind in brackets."""
    for kind, pattern in SECRET_PATTERNS.items():
        text = pattern.sub(f"[{kind}]", text)
    return text


@dataclass(frozen=True)
class TrafficRequest:
    id: str
    line: int
    messages: tuple[dict[str, Any], ...]
    segments: dict[str, str]
    max_tokens: int | None = None
    temperature: float | None = None  # None or 0: greedy
    n: int = 1  # answers per model: a sampled request is answered n times, fixed seeds
    response_format: dict[str, Any] | None = None
    tools: tuple[dict[str, Any], ...] = ()
    timestamp: float | None = None  # seconds since the epoch, where the log kept it
    digest: str = ""  # sha256 of the request as both models receive it (records keep this)
    secrets: tuple[str, ...] = ()  # credential kinds found in its text (never written)

    @property
    def sampled(self) -> bool:
        return bool(self.temperature)

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON Schema its answer must meet, where it asked for one."""
        fmt = self.response_format or {}
        spec = fmt.get("json_schema")
        return spec.get("schema") if fmt.get("type") == "json_schema" and isinstance(
            spec, dict) else None


def last_user_text(request: TrafficRequest) -> str:
    """The text of the request's last user turn (its parts joined): what the health checks
    hold an answer against (an answer that only repeats it is not healthy)."""
    for m in reversed(request.messages):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else ""
    return ""


@dataclass(frozen=True)
class Traffic:
    path: Path
    requests: tuple[TrafficRequest, ...]
    segment_keys: tuple[str, ...]
    digest: str  # of every request's digest, in order

    def segments(self) -> dict[str, dict[str, int]]:
        """Each segment key's labels and how many requests carry each."""
        out: dict[str, dict[str, int]] = {k: {} for k in self.segment_keys}
        for r in self.requests:
            for key, label in r.segments.items():
                out[key][label] = out[key].get(label, 0) + 1
        return out


@dataclass
class _Problems:
    path: Path
    lines: list[str] = field(default_factory=list)

    def add(self, line: int, where: str, what: str) -> None:
        self.lines.append(f"{self.path}: line {line}: {where}: {what}")


def read_traffic(path: Path) -> Traffic:
    """Every request of a traffic file, validated (InputError listing every problem)."""
    problems = _Problems(path)
    requests = []
    for number, text in enumerate(jsonl_lines(path), start=1):
        if not text.strip():
            continue
        req = _request(number, text, problems)
        if req is not None:
            requests.append(req)
    if not requests and not problems.lines:
        problems.lines.append(f"{path}: no requests (a JSONL file of one request a line)")
    keys = _segment_keys(requests, problems)
    _unique_ids(requests, problems)
    if problems.lines:
        raise InputError(problems.lines[0], problems.lines)
    digest = hashlib.sha256("".join(r.digest for r in requests).encode()).hexdigest()
    return Traffic(path, tuple(requests), keys, digest)


def _request(number: int, text: str, problems: _Problems) -> TrafficRequest | None:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        problems.add(number, "the line", f"not JSON ({err.msg} at column {err.colno})")
        return None
    except ValueError:  # a number past Python's digit limit
        problems.add(number, "the line", "not JSON this reader takes (a number too long)")
        return None
    if not isinstance(row, dict):
        problems.add(number, "the line", "not a JSON object")
        return None
    body, rid = (row["body"], row.get("custom_id")) if "body" in row else (row, row.get("id"))
    if not isinstance(body, dict):
        problems.add(number, "body", "not a JSON object")
        return None
    body = {k: v for k, v in body.items() if v is not None}  # a logged null is an absent field
    if rid is not None and not isinstance(rid, str | int):
        problems.add(number, "id", f"a string or a whole number, not {_kind(rid)}")
    before = len(problems.lines)
    messages = _messages(number, body, problems)
    segments = _labels(number, row.get("segments", body.get("metadata")), problems)
    params = _params(number, body, problems)
    stamp = _timestamp(number, row.get("timestamp"), problems)
    if len(problems.lines) > before or messages is None:
        return None
    request = {"messages": messages, **params}
    text = json.dumps(request, sort_keys=True)
    tools = tuple(params.pop("tools", ()))
    rid = str(rid) if rid is not None else f"line-{number}"
    # ids and labels are written to records: a credential in them counts too
    written = json.dumps([rid, segments], ensure_ascii=False)
    return TrafficRequest(
        id=rid, line=number, messages=tuple(messages), segments=segments, timestamp=stamp,
        digest=hashlib.sha256(text.encode()).hexdigest(), tools=tools,
        secrets=tuple(sorted(set(secret_kinds(text)) | set(secret_kinds(written)))),
        **params)


def _messages(number: int, body: dict, problems: _Problems) -> list[dict] | None:
    if "messages" not in body:
        if isinstance(body.get("prompt"), str) and body["prompt"].strip():
            return [{"role": "user", "content": body["prompt"]}]
        problems.add(number, "messages", "missing (give chat `messages`, or a `prompt`)")
        return None
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        problems.add(number, "messages", "not a non-empty list")
        return None
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            problems.add(number, f"messages[{i}].role", f"one of {', '.join(ROLES)}")
        elif not _has_content(m):
            problems.add(number, f"messages[{i}].content", "missing or not text")
    if isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        problems.add(number, f"messages[{len(messages) - 1}]", "the last turn is the "
                     "assistant's: there is nothing to answer")
    return messages


def _has_content(m: dict) -> bool:
    content = m.get("content")
    if isinstance(content, str):
        return True
    if isinstance(content, list):  # parts: text only (no images served here)
        return all(isinstance(p, dict) and p.get("type") == "text" and isinstance(
            p.get("text"), str) for p in content) and bool(content)
    return m.get("role") == "assistant" and bool(m.get("tool_calls"))


def _labels(number: int, raw: Any, problems: _Problems) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str | int | bool) for k, v in raw.items()):
        problems.add(number, "segments", "an object of key: label (strings)")
        return {}
    return {k: str(v) for k, v in raw.items()}


def _params(number: int, body: dict, problems: _Problems) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if tokens is not None:
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            problems.add(number, "max_tokens", f"a whole number of at least 1, not "
                                               f"{_kind(tokens)}")
        out["max_tokens"] = tokens
    temperature = body.get("temperature")
    if temperature is not None:
        if not isinstance(temperature, int | float) or isinstance(temperature, bool) or \
                not 0 <= temperature <= 2:
            problems.add(number, "temperature", f"a number from 0 to 2, not "
                                                f"{_kind(temperature)}")
        out["temperature"] = temperature
    n = body.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
        problems.add(number, "n", f"a whole number from 1 to 16, not {_kind(n)}")
    elif n > 1:
        out["n"] = n
    if body.get("response_format") is not None:
        out["response_format"] = body["response_format"]
        _response_format(number, body["response_format"], problems)
    if body.get("tools") is not None:
        out["tools"] = body["tools"]
        _tools(number, body["tools"], problems)
    return out


def _response_format(number: int, fmt: Any, problems: _Problems) -> None:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        problems.add(number, "response_format.type", "text, json_object or json_schema")
    elif kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        _schema(number, "response_format.json_schema.schema", schema, problems)


def _tools(number: int, tools: Any, problems: _Problems) -> None:
    if not isinstance(tools, list) or not tools:
        problems.add(number, "tools", "a non-empty list of functions")
        return
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or tool.get("type") != "function" or not isinstance(
                fn.get("name"), str):
            problems.add(number, f"tools[{i}]", '{"type": "function", "function": {"name": '
                         '..., "parameters": {...}}}')
        elif fn.get("parameters") is not None:
            _schema(number, f"tools[{i}].function.parameters", fn["parameters"], problems)


def _schema(number: int, where: str, schema: Any, problems: _Problems) -> None:
    if not isinstance(schema, dict):
        problems.add(number, where, "missing or not a JSON object")
        return
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as err:
        at = "/".join(str(p) for p in err.path) or "the top"
        problems.add(number, where, f"not a valid JSON Schema (at {at}: its "
                                    f"{err.validator!r} keyword)")
        return
    if _unresolvable(schema):
        problems.add(number, where, "a $ref it cannot resolve (a schema is used as given, "
                                    "with no network or other files)")


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    return [r for v in node for r in _refs(v)] if isinstance(node, list) else []


def _unresolvable(schema: dict) -> bool:
    """A schema whose $ref points nowhere passes check_schema and fails on first use:
    each $ref is looked up by jsonschema's own resolver (referencing), with no retrieval."""
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    resolver = Registry().with_resource("urn:traffic", resource).resolver("urn:traffic")
    try:
        for ref in _refs(schema):
            resolver.lookup(ref)
    except Unresolvable:
        return True
    return False


def _kind(value: Any) -> str:
    """A value named by its JSON type: a wrong field may hold a prompt's text, which an
    error line never quotes."""
    names = {bool: "true/false", int: "a number", float: "a number", str: "text",
             list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _timestamp(number: int, raw: Any, problems: _Problems) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    problems.add(number, "timestamp", "seconds since the epoch or an ISO 8601 time")
    return None


def _segment_keys(requests: list[TrafficRequest], problems: _Problems) -> tuple[str, ...]:
    """The segment keys: every request must carry the same ones (a key on some lines only
    would leave requests out of its segments unseen)."""
    keys: list[str] = []
    for r in requests:
        keys += [k for k in r.segments if k not in keys]
    for key in keys:
        missing = [r.line for r in requests if key not in r.segments]
        if missing:
            first = next(r.line for r in requests if key in r.segments)
            problems.add(missing[0], "segments", f"no {key!r}, which line {first} has: every "
                         f"request names the same segment keys ({len(missing)} line(s) "
                         "without it)")
    return tuple(keys)


def _unique_ids(requests: list[TrafficRequest], problems: _Problems) -> None:
    seen: dict[str, int] = {}
    for r in requests:
        if r.id in seen:
            # not quoted: an id may hold what must not be printed (a credential)
            problems.add(r.line, "id", f"the same as line {seen[r.id]}'s (ids are unique)")
        seen.setdefault(r.id, r.line)
