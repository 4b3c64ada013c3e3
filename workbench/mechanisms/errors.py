"""Domain errors. Each carries the one-line message a user sees and the CLI exit code.

Exit codes are the CI contract (docs/architecture.md): 0 promote, 1 reject/inconclusive,
2 invalid input, 3 infrastructure failure.
"""

from __future__ import annotations

__all__ = ["EXIT_INFRA", "EXIT_PROMOTE", "EXIT_REJECT", "InfraError", "InputError",
           "WorkbenchError"]

EXIT_PROMOTE = 0
EXIT_REJECT = 1
EXIT_INFRA = 3


class WorkbenchError(Exception):
    """Base class: ``str(err)`` is user-facing text, ``exit_code`` what the CLI returns."""

    exit_code = 1


class InputError(WorkbenchError):
    """Bad config, suite, path or argument: nothing was started, nothing half-written."""

    exit_code = 2

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class InfraError(WorkbenchError):
    """The engine would not start, died or timed out, or a subprocess failed."""

    exit_code = 3
