"""Instruction-following checks for IFBench prompts.

Written here from the instruction texts (the sentence each IFBench prompt ends with), not
taken from IFBench's code: that code needs nltk, spaCy and emoji data this environment does
not carry. Only instructions that can be checked mechanically are supported; the shipped
suite keeps the IFBench prompts whose every instruction is one of these (94 of 294), and
`workbench validate` rejects an item naming any other.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

__all__ = ["CHECKERS", "check_instructions"]

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# Words title case leaves in lower case (articles, short conjunctions and prepositions).
_MINOR = frozenset("a an the and but or nor for so yet as at by in of off on per to up via "
                   "vs with from into onto over".split())


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def _count_word(text: str, word: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE))


def _is_emoji(ch: str) -> bool:
    return unicodedata.category(ch) == "So" or 0x1F000 <= ord(ch) <= 0x1FAFF


def keywords_multiple(text: str, kw: dict) -> bool:
    """keyword1 once, keyword2 twice, keyword3 three, keyword4 five, keyword5 seven times."""
    wanted = {"keyword1": 1, "keyword2": 2, "keyword3": 3, "keyword4": 5, "keyword5": 7}
    return all(_count_word(text, kw[k]) == n for k, n in wanted.items())


def word_count_range(text: str, kw: dict) -> bool:
    return int(kw["min_words"]) <= len(_words(text)) <= int(kw["max_words"])


def unique_word_count(text: str, kw: dict) -> bool:
    return len({w.lower() for w in _words(text)}) >= int(kw["N"])


def numbers_count(text: str, kw: dict) -> bool:
    return len(_NUMBER.findall(text)) == int(kw["N"])


def emoji_every_sentence(text: str, kw: dict) -> bool:
    """Every sentence ends with an emoji (trailing punctuation or space around it allowed)."""
    parts = [p.strip() for p in re.split(r"(?<=[.!?\U0001F000-\U0001FAFF\u2600-\u27BF])\s+",
                                         text.strip()) if p.strip()]
    def ends_with_emoji(part: str) -> bool:
        tail = part.rstrip(" .!?\ufe0f\u200d")
        return bool(tail) and _is_emoji(tail[-1])
    return bool(parts) and all(ends_with_emoji(p) for p in parts)


def nested_brackets(text: str, kw: dict) -> bool:
    """Brackets of any of the three kinds nested at least five deep, properly closed."""
    pairs, stack, deepest = {")": "(", "]": "[", "}": "{"}, [], 0
    for ch in text:
        if ch in "([{":
            stack.append(ch)
            deepest = max(deepest, len(stack))
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return deepest >= 5 and not stack


def no_whitespace(text: str, kw: dict) -> bool:
    return bool(text.strip()) and not re.search(r"\s", text.strip())


def one_word_per_line(text: str, kw: dict) -> bool:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return bool(lines) and all(len(_words(line)) == 1 for line in lines)


def title_case(text: str, kw: dict) -> bool:
    words = [w for w in _words(text) if w[0].isalpha()]
    return bool(words) and all(w[0].isupper() for i, w in enumerate(words)
                               if i == 0 or w.lower() not in _MINOR)


def _options(spec: str) -> list[str]:
    if re.match(r"\W*a\W*b\W*c", spec, re.IGNORECASE):
        return ["a)", "b)", "c)", "d)"]
    parts = spec.split("/") if "/" in spec else re.split(r"\s+or\s+|,\s*", spec)
    return [p.strip() for p in parts if p.strip()]


def one_option(text: str, kw: dict) -> bool:
    """The whole answer is one of the options, with no explanation."""
    norm = text.strip().strip(".!\"'").strip().lower()
    return norm in {o.lower() for o in _options(kw["options"])} or (
        kw["options"].lower().startswith("a)") and re.fullmatch(r"[a-d]\)?", norm) is not None)


def custom_bullets(text: str, kw: dict) -> bool:
    """Two or more items each introduced by the given marker, no ordinary bullets."""
    sep = kw["sep"]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    marked = sum(line.startswith(sep) for line in lines)
    ordinary = any(re.match(r"[*•]\s|-\s|\d+[.)]\s", line) for line in lines
                   if not line.startswith(sep))
    return marked >= 2 and not ordinary


def word_positions(text: str, kw: dict) -> bool:
    """The second word and the second-to-last word are the keyword."""
    words = [w.lower() for w in _words(text)]
    key = kw["keyword"].lower()
    return len(words) >= 3 and words[1] == key and words[-2] == key


def palindromes(text: str, kw: dict) -> bool:
    found = {w.lower() for w in _words(text) if len(w) >= 5 and w.lower() == w.lower()[::-1]}
    return len(found) >= 10


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def prime_lengths(text: str, kw: dict) -> bool:
    words = _words(text)
    return bool(words) and all(_is_prime(len(w)) for w in words)


def consonant_clusters(text: str, kw: dict) -> bool:
    words = [w for w in _words(text) if w[0].isalpha()]
    return bool(words) and all(re.search(r"[b-df-hj-np-tv-z]{2}", w, re.IGNORECASE)
                               for w in words)


def keyword_in_sentence(text: str, kw: dict) -> bool:
    sentences = _sentences(text)
    n = int(kw["N"])
    return len(sentences) >= n and _count_word(sentences[n - 1], kw["word"]) > 0


CHECKERS: dict[str, Callable[[str, dict], bool]] = {
    "count:keywords_multiple": keywords_multiple,
    "count:word_count_range": word_count_range,
    "count:unique_word_count": unique_word_count,
    "count:numbers": numbers_count,
    "format:emoji": emoji_every_sentence,
    "format:parentheses": nested_brackets,
    "format:no_whitespace": no_whitespace,
    "format:newline": one_word_per_line,
    "format:title_case": title_case,
    "format:options": one_option,
    "format:list": custom_bullets,
    "words:words_position": word_positions,
    "words:palindrome": palindromes,
    "words:prime_lengths": prime_lengths,
    "words:consonants": consonant_clusters,
    "sentence:keyword": keyword_in_sentence,
}


def check_instructions(response: str, instructions: list[dict]) -> list[bool]:
    """Whether the response follows each instruction ({"id": ..., "kwargs": {...}})."""
    return [CHECKERS[i["id"]](response, i.get("kwargs") or {}) for i in instructions]
