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
- looping: of the word 3-grams in the response's second half, the share that already
  occurred earlier in it (characters stand in for words in scripts written without
  spaces) reaches LOOP_SHARE, over at least MIN_NGRAMS 3-grams. Prose and code repeat a
  phrase now and then; a loop repeats nearly everything it says after its first cycle,
  and runs to the end.
- garbage: word fragments rather than words. In Latin script: under a tenth of the words
  are function words of the suites' languages while a tenth or more are 13+ letters long
  (fragments glued together: "idersahiahi"), or, over 12+ words, under 5% are function
  words. In any script: three in ten characters are neither letters, digits, spaces nor
  common punctuation.
- language drift: the response is written in another script than the prompt (a Japanese
  question answered in Latin script, say) or, both in Latin script, its function words are
  another language's (a French question answered in English).

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

LOOP_SHARE = 0.6
MIN_NGRAMS = 8
# A unit is a word, or one character of a script written without spaces (Chinese,
# Japanese, Thai).
_UNIT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0e7f]|"
                   r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str  # "ok", or what broke: "looping: 92% of the second half's 3-grams repeat"
    signals: dict[str, float]


def _units(text: str) -> list[str]:
    return [u.lower() for u in _UNIT.findall(text)]


def repeat_share(text: str, n: int = 3) -> tuple[float, int]:
    """(share of the n-grams in the response's second half that already occurred earlier
    in it, number of n-grams). A loop runs to the end of the response, so its second half
    is almost all repetition, whatever it said before the loop began; an answer that
    repeats a phrase now and then, or restates the question, stays far below."""
    units = _units(text)
    grams = [tuple(units[i:i + n]) for i in range(len(units) - n + 1)]
    if len(grams) < 2:
        return 0.0, len(grams)
    half = len(grams) // 2
    seen = set(grams[:half])
    repeats = 0
    for gram in grams[half:]:
        repeats += gram in seen
        seen.add(gram)
    return repeats / (len(grams) - half), len(grams)


def _script(ch: str) -> str | None:
    """A letter's script, by the first word of its Unicode name (LATIN, CYRILLIC, CJK...)."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0]
    return {"HIRAGANA": "CJK", "KATAKANA": "CJK", "CJK": "CJK", "HANGUL": "HANGUL"}.get(
        first, first) or None


def dominant_script(text: str, min_letters: int = 8) -> str | None:
    counts = Counter(s for ch in text if (s := _script(ch)))
    if sum(counts.values()) < min_letters:
        return None
    script, n = counts.most_common(1)[0]
    return script if n / sum(counts.values()) >= 0.6 else None


# Function words of the Latin-script languages the shipped suites use (arithmetic-
# multilingual's, the calibration text's). In real prose they are a fifth or more of all
# words, in word fragments they are rare; and which language's words dominate tells a
# French question answered in English.
_FUNCTION_WORDS_BY_LANGUAGE = {
    "English": "the a an and or of to in on at for with is are was were be it this that you "
               "we he she they not as by from but if so do can will your my his her its our "
               "their what which there have has had all one no yes here how when who answer",
    "French": "le la les un une et de des du est en que qui pour dans pas sur il elle nous "
              "vous par font réponse",
    "Spanish": "el los las y es por con para una lo del se al cuánto responde",
    "German": "der die das und ist nicht ein eine zu mit den dem von im auf sie ich es nur",
    "Italian": "il lo gli e di che per non con una sono fa quanto rispondi",
    "Portuguese": "o os um uma e de do da que para com não em é quanto apenas",
    "Dutch": "de het een en van is dat niet op te met hoeveel alleen",
}
_FUNCTION_WORDS = frozenset(w for words in _FUNCTION_WORDS_BY_LANGUAGE.values()
                            for w in words.split())
_LANGUAGE_WORDS = {lang: frozenset(words.split())
                   for lang, words in _FUNCTION_WORDS_BY_LANGUAGE.items()}


def latin_language(text: str) -> str | None:
    """The language whose function words the text uses most, when at least two of its
    words appear and no other language ties it; else None."""
    words = re.findall(r"[^\W\d_]+", text.lower())
    hits = sorted(((sum(w in vocab for w in words), lang)
                   for lang, vocab in _LANGUAGE_WORDS.items()), reverse=True)
    (best, lang), (second, _) = hits[0], hits[1]
    return lang if best >= 2 and best > second else None


_FRAGMENT_MIN_WORDS = 12
_GLUED_MIN_WORDS = 8
_GLUED_LETTERS = 13


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
    if len(words) < _GLUED_MIN_WORDS:
        return False, signals
    function = sum(w in _FUNCTION_WORDS for w in words) / len(words)
    # fragments glued without spaces ("idersahiahi"): words this long are rare in prose
    glued = sum(len(w) >= _GLUED_LETTERS for w in words) / len(words)
    signals |= {"function_word_share": round(function, 3), "long_word_share": round(glued, 3)}
    return (function < 0.10 and glued >= 0.10) or (
        len(words) >= _FRAGMENT_MIN_WORDS and function < 0.05), signals


def generation_health(response: str, prompt: str = "", truncated: bool = False) -> Health:
    """Judge one generated response; the first signal that fires is the reason."""
    signals: dict[str, float] = {"truncated": float(truncated)}
    if not any(ch.isalnum() for ch in response):
        return Health(False, "empty: no letter or digit", signals)
    share, grams = repeat_share(response)
    signals |= {"repeat_share": round(share, 3), "ngrams": float(grams)}
    if grams >= MIN_NGRAMS and share >= LOOP_SHARE:
        return Health(False, f"looping: {share:.0%} of the second half's 3-grams repeat",
                      signals)
    script = dominant_script(response)
    garbage, more = _garbage(response, script)
    signals |= more
    if garbage:
        return Health(False, "garbage: word fragments or symbols, not text", signals)
    drift = _drift(prompt, response, script) if prompt else None
    if drift:
        return Health(False, drift, signals)
    return Health(True, "ok", signals)


def _drift(prompt: str, response: str, script: str | None) -> str | None:
    """Another script than the prompt's, or (both in Latin script) another language."""
    asked = dominant_script(prompt, min_letters=4)
    if asked and script and asked != script:
        return f"language drift: asked in {asked.title()} script, answered in {script.title()}"
    if asked == script == "LATIN":
        asked_lang, said_lang = latin_language(prompt), latin_language(response)
        if asked_lang and said_lang and asked_lang != said_lang:
            return f"language drift: asked in {asked_lang}, answered in {said_lang}"
    return None


class _Judged(Protocol):
    health: str


def health_summary(items: Iterable[_Judged]) -> dict:
    """Items judged, the healthy share, and how many broke each way (looping, empty, ...)."""
    judged = [i.health for i in items if i.health]
    reasons = Counter(h.split(":", 1)[0] for h in judged if h != "ok")
    return {"n": len(judged), "healthy": (len(judged) - sum(reasons.values())) / len(judged)
            if judged else 0.0, "degenerate": dict(sorted(reasons.items()))}
