import pytest

from workbench.suites.scorers.instructions import CHECKERS, check_instructions

CASES = [
    ("count:word_count_range", {"min_words": 3, "max_words": 4}, "one two three", "one two"),
    ("count:unique_word_count", {"N": 3}, "a b c a", "a a b a"),
    ("count:numbers", {"N": 2}, "In 1999 and 2024.", "In 1999, 2000 and 2024."),
    ("count:keywords_multiple",
     {"keyword1": "a", "keyword2": "b", "keyword3": "c", "keyword4": "d", "keyword5": "e"},
     "a b b c c c d d d d d e e e e e e e", "a b c d e"),
    ("format:emoji", {}, "Hello there 🙂. Bye now 🚀", "Hello there 🙂. Bye now."),
    ("format:parentheses", {}, "x (a [b {c (d [e])}]) y", "x (a [b {c}]) y"),
    ("format:no_whitespace", {}, "no_spaces_here", "two words"),
    ("format:newline", {}, "one\nword\neach", "two words\nhere"),
    ("format:title_case", {}, "The Cat and the Hat", "The cat and the hat"),
    ("format:options", {"options": "yes/no/maybe"}, "Maybe.", "Maybe, it depends."),
    ("format:list", {"sep": "!?!?"}, "!?!? apples\n!?!? pears", "- apples\n- pears"),
    ("words:words_position", {"keyword": "cat"}, "The cat sat on the cat mat",
     "The dog sat on the mat"),
    ("words:palindrome", {}, "level radar civic refer madam kayak rotor stats tenet noon "
                             "racecar solos", "level radar"),
    ("words:prime_lengths", {}, "an old cat", "a big house"),
    ("words:consonants", {}, "strong black craft", "a strong tea"),
    ("sentence:keyword", {"N": 2, "word": "fox"}, "One. The fox ran. Three.",
     "The fox. Two. Three."),
]


@pytest.mark.parametrize(("name", "kwargs", "follows", "breaks"), CASES,
                         ids=[c[0] for c in CASES])
def test_each_checker_tells_a_followed_instruction_from_a_broken_one(
        name: str, kwargs: dict, follows: str, breaks: str) -> None:
    assert CHECKERS[name](follows, kwargs)
    assert not CHECKERS[name](breaks, kwargs)


def test_every_checker_has_a_case() -> None:
    assert {c[0] for c in CASES} == set(CHECKERS)


def test_an_item_reports_each_instruction() -> None:
    checks = [{"id": "format:no_whitespace"}, {"id": "count:numbers", "kwargs": {"N": 1}}]
    assert check_instructions("abc,1", checks) == [True, True]
    assert check_instructions("abc", checks) == [True, False]
