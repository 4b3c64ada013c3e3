"""Generation health: what counts as text, and what as a broken model's output."""

import pytest

from workbench.suites.scorers.generation_health import (
    generation_health,
    health_summary,
    repeat_share,
)


@pytest.mark.parametrize("text", [
    "7 + 5 = 12.",
    "12",
    "To make a stir-fry, heat a wok, add oil, then the vegetables, and stir for five minutes.",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "def add(a, b):\n    return a + b\n",
    "I'm sorry, but I can't help with that.",
])
def test_text_is_healthy(text: str) -> None:
    health = generation_health(text, "What is 7 + 5? Answer briefly.")
    assert health.healthy, (text, health)


@pytest.mark.parametrize("text,reason", [
    ("", "empty"),
    ("   \n\n  ", "empty"),
    ("...!!!", "empty"),
    ("The infamous bridge is iconic, iconic, iconic, iconic, iconic, iconic, iconic, "
     "iconic, iconic, iconic, iconic, iconic.", "looping"),
    ("I can help. " * 30, "looping"),
    ("ingtionedly ationsment ousness ingtion ers mentation izing ableness edly "
     "ousity ments ingly ished atory", "garbage"),
    ("x§¤¶ q§¤¶ÿ z¤¶§ k¶¶¤§ w§§¤¶ ¤¶§ t§¤¶", "garbage"),
])
def test_broken_output_is_unhealthy_with_its_reason(text: str, reason: str) -> None:
    health = generation_health(text, "Write a short note about bridges.")
    assert not health.healthy and health.reason.startswith(reason), health


def test_an_answer_in_the_language_asked_is_healthy() -> None:
    assert generation_health("Bonjour ! La réponse est douze, car sept plus cinq font douze.",
                             "Combien font 7 + 5 ? Réponds par le nombre.").healthy
    assert generation_health("七加五等于十二，因为七加五是十二。", "七加五等于多少？").healthy


def test_an_answer_in_another_script_is_drift() -> None:
    health = generation_health("Это ответ на совершенно другом языке и алфавите.",
                               "Describe the weather in Paris today.")
    assert not health.healthy and health.reason.startswith("language drift")
    # a question in Chinese answered in Chinese is not drift
    assert generation_health("今天巴黎的天气很好，阳光明媚。", "描述一下今天巴黎的天气").healthy
    french = "Combien font 7 + 1 ? Réponds uniquement par le nombre."
    drift = generation_health("The answer to the question is 8.", french)
    assert drift.reason == "language drift: asked in French, answered in English"
    assert generation_health("La réponse est 8.", french).healthy
    assert generation_health("8", french).healthy  # a bare number has no language


def test_truncation_is_recorded_but_not_unhealthy() -> None:
    health = generation_health("A long answer that ran into the token limit before it",
                               truncated=True)
    assert health.healthy and health.signals["truncated"] == 1.0


def test_repeat_share_counts_the_second_half_repeating_the_text() -> None:
    assert repeat_share("a b c d e f g h")[0] == 0.0
    share, grams = repeat_share("one two three four a b c a b c a b c a b c")
    assert grams == 14 and share == 1.0  # the second half is the loop
    share, _ = repeat_share("the cat sat on the mat and then the cat sat by the door again")
    assert share < 0.3  # a phrase said twice is not a loop


def test_health_summary_counts_reasons() -> None:
    class Item:
        def __init__(self, health: str) -> None:
            self.health = health

    items = [Item("ok"), Item("looping: 3-gram repeat share 0.90"), Item("empty: no letter"),
             Item("ok"), Item("")]  # "" was not generated: not counted
    assert health_summary(items) == {"n": 4, "healthy": 0.5,
                                     "degenerate": {"empty": 1, "looping": 1}}
