"""docs/cli.md is every command's `--help` (cli/help_doc.py): when an option or a command's
help changes, the page must be regenerated with it, or this test fails in CI."""

from __future__ import annotations

from workbench.cli.help_doc import DOC, render


def test_the_cli_reference_is_the_help_the_code_prints() -> None:
    assert DOC.read_text() == render(), (
        "docs/cli.md is out of date: run `python -m workbench.cli.help_doc`")


def test_every_command_and_option_is_on_the_page() -> None:
    from workbench.cli import main

    page = render()
    for name, command in main.commands.items():
        assert f"## workbench {name}" in page
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in page, (name, opt)
