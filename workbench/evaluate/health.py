"""Generation health: is a generated response text at all, or has the model broken?

A quantised model can lose quality in ways no score was built to see: its answers loop
("iconic, iconic, iconic, ..."), come back empty, dissolve into word fragments or switch
script. Scorers that only look for something (a number, a refusal phrase, a JSON object)
can be fooled by such output, and can even reward it. So every generated response is
checked on its own, before any scorer reads it, and the result travels with the item:
`checks["healthy"]` (1.0 / 0.0) and a one-line reason. Paired with the baseline like any
other per-item check, it gives a health rate, flips and a non-inferiority gate.

The signals and their thresholds were chosen on the labelled responses in
`eval_suites/health-labels` (the default model, its int4 candidate and a checkpoint with
noisy weights; `benchmarks/health_detector.py` prints precision and recall, docs/gates.md
has the figures). Written here: no dependency offers a degeneration detector, and each
signal is a few lines of counting.

- empty: no letter or digit at all.
- looping: the share of word 3-grams that repeat an earlier 3-gram of the same response
  (characters stand in for words in scripts written without spaces) reaches
  LOOP_SHARE, over at least MIN_NGRAMS 3-grams. Prose and code repeat a phrase now and
  then; a loop repeats nearly everything it says after its first cycle.
- garbage: word fragments rather than words: few of the words are common function words
  of the response's script (English, or the Latin-script languages below) while many are
  short fragments, or most characters are neither letters, digits, spaces nor common
  punctuation.
- script drift: the response is written in another script than the prompt (a Latin-script
  request answered in Cyrillic or Han, say).

Running into max_tokens is recorded (`checks["truncated"]`) but is not unhealthy on its
own: small smoke budgets cut many healthy answers short, and a loop that runs to the limit
is caught as a loop.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["LOOP_SHARE", "MIN_NGRAMS", "Health", "generation_health", "health_summary",
           "repeat_share"]

LOOP_SHARE = 0.5
MIN_NGRAMS = 8
# Scripts without spaces between words: each character is a unit.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0e7f]")
_UNIT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0e7f]|"
                   r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str  # "ok", or what broke: "looping: 3-gram repeat share 0.82", ...
    signals: dict[str, float]


def _units(text: str) -> list[str]:
    return [u.lower() for u in _UNIT.findall(text)]


def repeat_share(text: str, n: int = 3) -> tuple[float, int]:
    """(share of n-grams that repeat an earlier one, number of n-grams)."""
    units = _units(text)
    grams = [tuple(units[i:i + n]) for i in range(len(units) - n + 1)]
    if not grams:
        return 0.0, 0
    repeats = len(grams) - len(set(grams))
    return repeats / len(grams), len(grams)


def _script(ch: str) -> str | None:
    """A letter's script, by the first word of its Unicode name (LATIN, CYRILLIC, CJK...)."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0]
    return {"HIRAGANA": "CJK", "KATAKANA": "CJK", "CJK": "CJK", "HANGUL": "HANGUL"}.get(
        first, first) or None


def dominant_script(text: str, min_letters: int = 12) -> str | None:
    counts = Counter(s for ch in text if (s := _script(ch)))
    if sum(counts.values()) < min_letters:
        return None
    script, n = counts.most_common(1)[0]
    return script if n / sum(counts.values()) >= 0.6 else None


# Function words: in real prose of these languages they are a fifth or more of all words;
# in fragments of words they are rare. The languages are those of the shipped suites
# written in Latin script (arithmetic-multilingual's, and the calibration text's).
_FUNCTION_WORDS = frozenset("""
the a an and or of to in on at for with is are was were be it this that you i we he she
they not as by from but if so do can will your my his her its our their what which there
have has had all one no yes here how when who
le la les un une et de des du est en que qui pour dans pas sur il elle nous vous
el los las y es por con para una lo del se
der die das und ist nicht ein eine zu mit den dem von im auf sie ich es
il lo la e di che per non con una sono
o os as um uma e de do da que para com não em
de het een en van is dat niet op te
""".split())
_FRAGMENT_MIN_WORDS = 12


def _garbage(text: str, script: str | None) -> tuple[bool, dict[str, float]]:
    """Word fragments or symbol noise, on responses long enough to judge."""
    chars = [ch for ch in text if not ch.isspace()]
    odd = sum(1 for ch in chars if not (ch.isalnum() or ch in ".,;:!?'\"()[]{}-_/*#=+<>%$&@`~|\\"))
    odd_share = odd / len(chars) if chars else 0.0
    signals = {"odd_char_share": round(odd_share, 3)}
    if len(chars) >= 20 and odd_share > 0.3:
        return True, signals
    if script != "LATIN":
        return False, signals
    words = re.findall(r"[^\W\d_]+", text.lower())
    if len(words) < _FRAGMENT_MIN_WORDS:
        return False, signals
    function = sum(w in _FUNCTION_WORDS for w in words) / len(words)
    signals["function_word_share"] = round(function, 3)
    return function < 0.05, signals


def generation_health(response: str, prompt: str = "", truncated: bool = False) -> Health:
    """Judge one generated response; the first signal that fires is the reason."""
    signals: dict[str, float] = {"truncated": float(truncated)}
    if not any(ch.isalnum() for ch in response):
        return Health(False, "empty: no letter or digit", signals)
    share, grams = repeat_share(response)
    signals |= {"repeat_share": round(share, 3), "ngrams": float(grams)}
    if grams >= MIN_NGRAMS and share >= LOOP_SHARE:
        return Health(False, f"looping: 3-gram repeat share {share:.2f}", signals)
    script = dominant_script(response)
    garbage, more = _garbage(response, script)
    signals |= more
    if garbage:
        return Health(False, "garbage: word fragments or symbols, not text", signals)
    asked = dominant_script(prompt, min_letters=4) if prompt else None
    if asked and script and asked != script:
        return Health(False, f"script drift: asked in {asked.title()}, answered in "
                             f"{script.title()}", signals)
    return Health(True, "ok", signals)


class _Judged(Protocol):
    health: str


def health_summary(items: Iterable[_Judged]) -> dict:
    """Items judged, the healthy share, and how many broke each way (looping, empty, ...)."""
    judged = [i.health for i in items if i.health]
    reasons = Counter(h.split(":", 1)[0] for h in judged if h != "ok")
    return {"n": len(judged), "healthy": (len(judged) - sum(reasons.values())) / len(judged)
            if judged else 0.0, "degenerate": dict(sorted(reasons.items()))}
