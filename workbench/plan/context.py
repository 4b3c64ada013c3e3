"""Whether every prompt fits the engine's context: each suite's longest prompt, with the
tokens the model's chat template adds around it, plus its max_tokens, against
engine.max_model_len. Counted with the model's own tokenizer when it has one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.config.run_config import RunConfig
from workbench.suites.definition import Suite, SuiteItem

__all__ = ["CHAT_TEMPLATE_MARGIN", "chat_overhead", "context_problems"]

# Tokens a chat template adds around a prompt (role markers, a default system prompt), when
# the model's template cannot be rendered here to count them exactly.
CHAT_TEMPLATE_MARGIN = 48


def _tokenizer(model_dir: Path) -> Any:  # tokenizers.Tokenizer | None
    file = model_dir / "tokenizer.json"
    if not file.is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(file))


def _chat_template(model_dir: Path) -> str | None:
    """The model's chat template: chat_template.jinja, or tokenizer_config.json's."""
    file = model_dir / "chat_template.jinja"
    if file.is_file():
        return file.read_text(errors="replace")
    config = model_dir / "tokenizer_config.json"
    try:
        template = json.loads(config.read_text()).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    return template if isinstance(template, str) else None


def _special_tokens(model_dir: Path) -> tuple[str, str]:
    """The model's BOS and EOS strings (tokenizer_config.json), for templates that write
    them; empty where not named."""
    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return "", ""

    def text(token: Any) -> str:
        token = token.get("content") if isinstance(token, dict) else token
        return token if isinstance(token, str) else ""

    return text(config.get("bos_token")), text(config.get("eos_token"))


def _flat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turns whose content is a list of parts with their text parts joined, as vLLM gives
    them to a template that takes a string."""
    def joined(content: Any) -> Any:
        if not isinstance(content, list):
            return content
        return "\n".join(p.get("text", "") for p in content
                         if isinstance(p, dict) and p.get("type", "text") == "text")

    return [{**m, "content": joined(m.get("content"))} for m in messages]


def _rendered(model_dir: Path, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]] | None = None,
              specials: tuple[str, str] = ("", "")) -> str | None:
    """The model's chat template rendered over these turns (and tools), as the engine
    renders it before the answer: with jinja2 in a sandbox, as transformers renders chat
    templates. None when the template cannot be read or rendered here."""
    template = _chat_template(model_dir)
    if template is None:
        return None
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=messages, tools=tools,
                                                add_generation_prompt=True,
                                                bos_token=specials[0], eos_token=specials[1])
    except Exception:  # noqa: BLE001 - any template we cannot render here
        return None


def chat_overhead(model_dir: Path, tok: Any, system_prompt: str | None) -> int:
    """Tokens the chat template adds around one user message (with the suite's system
    prompt), counted with the model's tokenizer; CHAT_TEMPLATE_MARGIN when the template
    cannot be read or rendered here."""
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": "x"}]
    text = _rendered(model_dir, messages)
    if text is None:
        return CHAT_TEMPLATE_MARGIN
    return max(0, len(tok.encode(text).ids) - len(tok.encode("x").ids))


def _text(item: SuiteItem) -> str:
    """What an item sends: its prompt, or a traffic request's every turn and tool."""
    if item.request is None:
        return item.prompt
    turns = [m.get("content") for m in item.request.messages]
    parts = [t if isinstance(t, str) else json.dumps(t) for t in turns if t]
    return "\n".join(parts + [json.dumps(list(item.request.tools))] * bool(item.request.tools))


def _request_tokens(model_dir: Path, tok: Any, item: SuiteItem, overhead: int
                    ) -> tuple[int, str]:
    """A traffic request's prompt as the engine receives it: every turn and tool through
    the chat template; where the template cannot be rendered here, its text with the
    template's overhead for one turn (an approximation, said so)."""
    assert item.request is not None
    text = _rendered(model_dir, _flat(list(item.request.messages)),
                     list(item.request.tools) or None, _special_tokens(model_dir))
    if text is not None:  # the template writes what special tokens it wants, as vLLM's
        return (len(tok.encode(text, add_special_tokens=False).ids),
                "its turns and tools through the chat template")
    return (len(tok.encode(_text(item)).ids) + overhead,
            f"its text, {overhead} of the chat template")


def context_problems(cfg: RunConfig, suites: list[Suite]) -> list[str]:
    """Suites with a prompt the engine would refuse (a 400 halfway through a run): one that
    leaves no room in engine.max_model_len for a single generated token, or a choice that
    does not fit after its prompt. Counted with the model's own tokenizer and chat template
    (a model folder without tokenizer.json is not checked). vLLM caps an answer at the
    context that remains (max_tokens is lowered, not refused), so a long prompt with a
    large max_tokens is not an error; such an answer may come back truncated, which the
    health check records."""
    model_dir = cfg.model.resolved_path(cfg.base_dir)
    tok = _tokenizer(model_dir) if (model_dir / "config.json").is_file() else None
    if tok is None:
        return []
    limit = cfg.engine.max_model_len
    problems = []
    for suite in suites:
        spec = suite.spec
        if spec.scoring == "lm-eval":
            continue
        items = suite.sample(cfg.profile, cfg.seed)
        longest = sorted(items, key=lambda it: len(_text(it)) + max(map(len, it.choices),
                                                                    default=0))[-8:]
        overhead = (chat_overhead(model_dir, tok, spec.system_prompt)
                    if spec.scoring not in ("logprobs", "choice", "code") else 0)
        for it in longest:
            prompt = len(tok.encode(_text(it)).ids)
            if spec.scoring == "logprobs":
                need, what = min(prompt, spec.max_prompt_tokens), "its text (cut)"
            elif spec.scoring == "choice":
                need = prompt + max(len(tok.encode(c).ids) for c in it.choices)
                what = "its prompt and longest choice"
            elif spec.scoring == "code":  # a raw completion: no chat template
                need, what = prompt + 1, "its prompt and one generated token"
            elif it.request is not None:
                sent, what = _request_tokens(model_dir, tok, it, overhead)
                need, what = sent + 1, f"{what} and one generated token"
            else:
                need = prompt + overhead + 1
                what = f"its prompt, {overhead} of the chat template and one generated token"
            if need > limit:
                problems.append(f"{suite.path / 'suite.yaml'}: item {it.id!r} needs {need} "
                                f"tokens ({what}), over engine.max_model_len {limit} of "
                                f"{cfg.source}")
                break
    return problems
