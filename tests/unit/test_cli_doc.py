"""docs/cli.md is every command's `--help` (cli/help_doc.py): when an option or a command's
help changes, the page must be regenerated with it, or this test fails in CI."""

from __future__ import annotations

import re

import pytest

from workbench.cli.help_doc import CLICK_LINE, DOC, click_version, render


def test_the_cli_reference_is_the_help_the_code_prints() -> None:
    page = DOC.read_text(encoding="utf-8")
    rendered_with = re.search(rf"^{CLICK_LINE}(\S+)\.$", page, re.M)
    assert rendered_with, "docs/cli.md does not say which click rendered it"
    if rendered_with.group(1) != click_version():  # another layout: not a drift of ours
        pytest.skip(f"docs/cli.md was rendered with click {rendered_with.group(1)}, this is "
                    f"{click_version()}")
    assert page == render(), "docs/cli.md is out of date: run `python -m workbench.cli.help_doc`"


def test_every_command_and_option_is_on_the_page() -> None:
    from workbench.cli import main

    page = render()
    for name, command in main.commands.items():
        assert f"## workbench {name}" in page
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in page, (name, opt)
