import pytest

from workbench.suites.definition import load_suite
from workbench.suites.scorers import sandbox
from workbench.suites.scorers.sandbox import run_python

CORRECT_HAS_CLOSE_ELEMENTS = """    for i, a in enumerate(numbers):
        for b in numbers[i + 1:]:
            if abs(a - b) < threshold:
                return True
    return False
"""


def test_passing_and_failing_programs() -> None:
    assert run_python("assert sum([1, 2]) == 3").outcome == "passed"
    failed = run_python("assert sum([1, 2]) == 4, 'wrong sum'")
    assert not failed.passed and failed.outcome == "failed" and "wrong sum" in failed.detail


def test_a_program_that_never_ends_is_stopped() -> None:
    result = run_python("import time\nwhile True: time.sleep(0.1)", timeout_s=1)
    assert result.outcome == "timeout"


def test_memory_is_limited() -> None:
    result = run_python("x = bytearray(4 * 1024 ** 3)", memory_mb=512)
    assert not result.passed and "MemoryError" in result.detail


@pytest.mark.parametrize("isolation", ["netns", "socket-blocked"])
def test_no_network_either_way(isolation: str, monkeypatch) -> None:
    if isolation == "netns" and sandbox.network_isolation() != "netns":
        pytest.skip("no unprivileged network namespaces on this machine")
    monkeypatch.setattr(sandbox, "network_isolation", lambda: isolation)
    result = run_python("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)")
    assert not result.passed and result.isolation == isolation
    assert "unreachable" in result.detail or "network disabled" in result.detail


def test_the_program_runs_in_an_empty_folder_with_a_minimal_environment() -> None:
    assert run_python("import os\nassert os.listdir('.') == ['program.py']\n"
                      "assert 'HOME' not in os.environ").passed


def test_humaneval_check_passes_a_correct_solution_and_fails_a_wrong_one() -> None:
    item = next(i for i in load_suite("humaneval").items if i.id == "humaneval-000")
    assert run_python(item.prompt + CORRECT_HAS_CLOSE_ELEMENTS + "\n" + item.check).passed
    assert not run_python(item.prompt + "    return False\n\n" + item.check).passed
