"""Build the demo model pair offline: a tiny Llama target and a 1-layer draft that vLLM accepts.

Run with the vLLM environment's python from the repository root (no Django here):

    .venv-vllm/bin/python -m workers.host.demo_models --out DIR [--set name=value ...]

writes DIR/target and DIR/draft (weights as safetensors, the shared fast BPE tokenizer)
and DIR/demo_build.json (the recipe, its figures and each phase's wall and CPU time). Most
callers want workers/host/model_cache.py instead, which builds once per machine into a
cache keyed by this file, its training text, the recipe and the library versions.

No model can be downloaded, so both are made from text the project ships: the built-in
prompt sets, each followed by a canned answer (code_edit repeats the snippet, summarise
quotes the passage's first sentences), so that greedy outputs depend on the prompt and copy
from it as real answers do.

The recipe (Recipe): train the 4-layer target on that text (small batches at a low learning
rate: 2 windows of 512 tokens a step at 1e-3 learnt more per CPU second than 4 at 2e-3), start
the draft from the target's embeddings, first layer, final norm and head, then distil it (KL to
the target's log-probabilities) on the target's own greedy continuations of the prompts, kept
from the generation itself, the loss and the draft's head only at the output positions: that
is where vLLM asks the draft to guess. Distilling on corpus text instead gave ~20 % acceptance
at position 0: the target's greedy output is off the corpus distribution. Step counts are
fixed rather than timed, so a build is reproducible on a given machine, thread count and torch
version. docs/benchmarks.md ("Demo models") has the build's time, the recipes tried and the
acceptance vLLM measured (scripts/check_demo_acceptance.py).
"""

import argparse
import dataclasses
import json
import math
import os
import random
import re
import resource
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Before torch loads OpenMP: its threads then sleep while they wait instead of spinning. On a
# shared 2-core host a spinning pair took 10x longer per training step than a sleeping one,
# at 5x the CPU time (docs/benchmarks.md, "Demo models").
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from experiments.prompts.catalog import builtin_prompt_sets

MAX_MODEL_LEN = 512
# Every built-in prompt must leave room for this many output tokens within MAX_MODEL_LEN.
OUTPUT_BUDGET = 64
BOS, EOS, PAD = "<s>", "</s>", "<pad>"

TARGET_LAYERS = 4
HIDDEN = 256
INTERMEDIATE = 768
HEADS = 4
# Small matrices stop scaling after a few threads; more only add synchronisation.
MAX_THREADS = 4


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What the build does; part of the cache key (workers/host/model_cache.py)."""

    seed: int = 20240601
    vocab_size: int = 2048
    target_steps: int = 240
    target_batch: int = 2
    target_lr: float = 1e-3
    continuation_tokens: int = OUTPUT_BUDGET
    generate_batch: int = 40
    distil_steps: int = 150
    distil_batch: int = 8
    distil_lr: float = 1e-3

    def replaced(self, assignments: list[str]) -> "Recipe":
        """This recipe with `name=value` assignments applied (for tuning it)."""
        types = {field.name: field.type for field in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for assignment in assignments:
            name, _, value = assignment.partition("=")
            if name not in types:
                raise SystemExit(f"Unknown recipe field {name!r}: one of {', '.join(types)}.")
            changes[name] = float(value) if types[name] in (float, "float") else int(value)
        return dataclasses.replace(self, **changes)


RECIPE = Recipe()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write target/ and draft/ into")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="change a recipe field")
    parser.add_argument("--threads", type=int, help="torch threads (default: see build_threads)")
    args = parser.parse_args(argv)
    build(args.out, RECIPE.replaced(args.set), threads=args.threads)
    return 0


def build(out: Path, recipe: Recipe = RECIPE, *, threads: int | None = None) -> dict:
    clock = _PhaseClock()
    threads = _seed_everything(recipe.seed, threads)
    prompts = [p for prompt_set in builtin_prompt_sets().values() for p in prompt_set.prompts]
    documents = [prompt + "\n\n" + _canned_answer(prompt) for prompt in prompts]
    tokenizer = train_tokenizer(documents, recipe.vocab_size)
    _check_prompt_lengths(tokenizer, prompts, max(OUTPUT_BUDGET, recipe.continuation_tokens))
    clock.lap("tokenizer")
    target = train_target(tokenizer, documents, recipe)
    clock.lap("target")
    continuations = greedy_continuations(target, tokenizer, prompts, recipe)
    clock.lap("continuations")
    draft = _draft_from_target(target, tokenizer)
    agreement = distil_draft(draft, continuations, tokenizer.pad_token_id, recipe)
    clock.lap("distil")
    report = {
        "recipe": dataclasses.asdict(recipe),
        "threads": threads,
        "draft_greedy_agreement": round(agreement, 4),
        "distinct_token_fraction": round(continuations.distinct_fraction(), 4),
    }
    _write(out, target, draft, tokenizer, report | clock.report())
    clock.lap("write")
    report |= clock.report()
    _log(f"done: {json.dumps(report)}")
    return report


def _seed_everything(seed: int, threads: int | None) -> int:
    threads = threads or min(MAX_THREADS, len(os.sched_getaffinity(0)))
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    random.seed(seed)
    return threads


_STARTED = time.monotonic()


def _log(message: str) -> None:
    print(f"[demo_models {time.monotonic() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _PhaseClock:
    """Wall and CPU seconds per phase: on a shared host the wall time says little alone."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, float]] = {}
        self._wall, self._cpu = time.monotonic(), _cpu_seconds()
        self._start_wall, self._start_cpu = _STARTED, 0.0

    def lap(self, name: str) -> None:
        wall, cpu = time.monotonic(), _cpu_seconds()
        self.phases[name] = {"wall": round(wall - self._wall, 1), "cpu": round(cpu - self._cpu, 1)}
        self._wall, self._cpu = wall, cpu

    def report(self) -> dict:
        return {
            "phase_seconds": dict(self.phases),
            "build_seconds": round(time.monotonic() - self._start_wall, 1),
            "build_cpu_seconds": round(_cpu_seconds() - self._start_cpu, 1),
        }


def _canned_answer(prompt: str) -> str:
    snippet = re.search(r"```python\n.*?```", prompt, re.DOTALL)
    if snippet:
        return "Here is the changed code:\n\n" + snippet.group(0)
    _, _, passage = prompt.partition("\n\n")
    if passage:
        return "Summary: " + " ".join(re.split(r"(?<=\.) ", passage)[:2])
    return ""


def train_tokenizer(documents: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE (any text encodes) that adds BOS in front, as Llama tokenizers do."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(documents, trainer=trainer)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, backend.token_to_id(BOS))]
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    tokenizer.model_max_length = MAX_MODEL_LEN
    return tokenizer


def _check_prompt_lengths(tokenizer: PreTrainedTokenizerFast, prompts: list[str], outputs: int) -> None:
    longest = max(len(tokenizer(prompt).input_ids) for prompt in prompts)
    if longest + outputs > MAX_MODEL_LEN:
        raise SystemExit(f"A built-in prompt has {longest} tokens: it leaves no room for {outputs} outputs.")
    _log(f"longest built-in prompt: {longest} tokens")


def _config(tokenizer: PreTrainedTokenizerFast, layers: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_MODEL_LEN,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="float32",
    )


def _training_windows(
    tokenizer: PreTrainedTokenizerFast, documents: list[str], rng: random.Random
) -> Iterator[list[int]]:
    """Endless MAX_MODEL_LEN windows: BOS, then documents in random order, so every document
    is also seen right after BOS, which is how a request's prompt arrives."""
    encoded = [tokenizer(doc + "\n\n", add_special_tokens=False).input_ids for doc in documents]
    while True:
        window = [tokenizer.bos_token_id]
        while len(window) < MAX_MODEL_LEN:
            window += rng.choice(encoded)
        yield window[:MAX_MODEL_LEN]


def _lr_at(step: int, steps: int, peak: float) -> float:
    warmup = max(1, steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def _optimise(
    model: LlamaForCausalLM,
    *,
    steps: int,
    peak_lr: float,
    weight_decay: float,
    loss_at: Callable[[int], torch.Tensor],
    name: str,
) -> LlamaForCausalLM:
    """AdamW with warm-up and cosine decay, clipped gradients; `loss_at(step)` gives each step's loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=peak_lr, weight_decay=weight_decay)
    model.train()
    log_every = max(1, steps // 5)
    for step in range(steps):
        loss = loss_at(step)
        _set_lr(optimizer, _lr_at(step, steps, peak_lr))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % log_every == 0 or step == steps - 1:
            _log(f"{name} step {step}: {loss.item():.3f}")
    return model.eval()


def train_target(tokenizer: PreTrainedTokenizerFast, documents: list[str], recipe: Recipe) -> LlamaForCausalLM:
    model = LlamaForCausalLM(_config(tokenizer, TARGET_LAYERS))
    windows = _training_windows(tokenizer, documents, random.Random(recipe.seed))

    def loss_at(step: int) -> torch.Tensor:
        batch = torch.tensor([next(windows) for _ in range(recipe.target_batch)])
        return model(input_ids=batch, labels=batch).loss

    return _optimise(
        model,
        steps=recipe.target_steps,
        peak_lr=recipe.target_lr,
        weight_decay=0.01,
        loss_at=loss_at,
        name="target",
    )


@dataclasses.dataclass
class Continuations:
    """The target's greedy continuations of the prompts: each row's prompt (with BOS) and output
    ids, and the target's log-probabilities at the positions that predict the output (the last
    prompt token's and every output token's but the last), as generation computed them."""

    prompts: list[list[int]]
    outputs: list[list[int]]
    logprobs: list[torch.Tensor]

    def distinct_fraction(self) -> float:
        """Mean share of distinct tokens in each output; near 0 means a degenerate loop."""
        return sum(len(set(output)) / len(output) for output in self.outputs) / len(self.outputs)


def greedy_continuations(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompts: list[str], recipe: Recipe
) -> Continuations:
    """Prompts go in left-padded batches of similar length: a generation step costs about the same
    whatever the batch, and padding a short prompt to a long one's length costs its prefill."""
    encoded = [tokenizer(prompt).input_ids for prompt in prompts]
    by_length = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    rows: dict[int, tuple[list[int], torch.Tensor]] = {}
    for start in range(0, len(by_length), recipe.generate_batch):
        group = by_length[start : start + recipe.generate_batch]
        generated = _generate_batch(model, [encoded[i] for i in group], tokenizer.pad_token_id, recipe)
        rows.update(zip(group, generated, strict=True))
    order = range(len(encoded))
    return Continuations([encoded[i] for i in order], [rows[i][0] for i in order], [rows[i][1] for i in order])


@torch.no_grad()
def _generate_batch(
    model: LlamaForCausalLM, encoded: list[list[int]], pad: int, recipe: Recipe
) -> list[tuple[list[int], torch.Tensor]]:
    steps = recipe.continuation_tokens
    width = max(len(row) for row in encoded)
    ids, mask = _left_padded(encoded, pad)
    output = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=steps,
        min_new_tokens=steps,
        do_sample=False,
        pad_token_id=pad,
        output_logits=True,
        return_dict_in_generate=True,
    )
    logprobs = F.log_softmax(torch.stack(output.logits, dim=1), dim=-1)
    return [(output.sequences[i, width:].tolist(), logprobs[i]) for i in range(len(encoded))]


def _left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


def _draft_from_target(target: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    draft = LlamaForCausalLM(_config(tokenizer, 1))
    draft.model.embed_tokens.load_state_dict(target.model.embed_tokens.state_dict())
    draft.model.layers[0].load_state_dict(target.model.layers[0].state_dict())
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    draft.lm_head.load_state_dict(target.lm_head.state_dict())
    return draft


def _draft_logprobs(draft: LlamaForCausalLM, continuations: Continuations, rows: list[int], pad: int) -> torch.Tensor:
    """The draft's log-probabilities where the target's are known, for `rows`: each sequence
    left-padded, so that those positions are the last ones of every row, and only there does
    the head run (most positions are the prompt's, which the loss skips)."""
    sequences = [continuations.prompts[i] + continuations.outputs[i][:-1] for i in rows]
    ids, mask = _left_padded(sequences, pad)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    keep = len(continuations.outputs[rows[0]])
    logits = draft(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
    return F.log_softmax(logits, dim=-1)


def distil_draft(draft: LlamaForCausalLM, continuations: Continuations, pad: int, recipe: Recipe) -> float:
    """Train the draft toward the target's distribution where the target continues a prompt
    (KL to its log-probabilities there). Returns the share of those positions where the draft's
    greedy token equals the target's."""
    order = random.Random(recipe.seed + 1)
    count = len(continuations.outputs)

    def loss_at(step: int) -> torch.Tensor:
        rows = order.sample(range(count), recipe.distil_batch)
        target = torch.stack([continuations.logprobs[i] for i in rows])
        logprobs = _draft_logprobs(draft, continuations, rows, pad)
        return (target.exp() * (target - logprobs)).sum(-1).mean()

    _optimise(
        draft,
        steps=recipe.distil_steps,
        peak_lr=recipe.distil_lr,
        weight_decay=0.0,
        loss_at=loss_at,
        name="distil KL",
    )
    return _greedy_agreement(draft, continuations, pad)


@torch.no_grad()
def _greedy_agreement(draft: LlamaForCausalLM, continuations: Continuations, pad: int) -> float:
    same = total = 0
    for start in range(0, len(continuations.outputs), 16):
        rows = list(range(start, min(start + 16, len(continuations.outputs))))
        guesses = _draft_logprobs(draft, continuations, rows, pad).argmax(-1)
        wanted = torch.stack([continuations.logprobs[i] for i in rows]).argmax(-1)
        same += int((guesses == wanted).sum())
        total += guesses.numel()
    return same / total


def _write(out: Path, target: LlamaForCausalLM, draft: LlamaForCausalLM, tokenizer, report: dict) -> None:
    """Write into a staging directory, then swap it in, so a failed build leaves no half model."""
    out.mkdir(parents=True, exist_ok=True)
    staging = out / ".demo_models.partial"
    shutil.rmtree(staging, ignore_errors=True)
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(staging / name)
        tokenizer.save_pretrained(staging / name)
    (staging / "demo_build.json").write_text(json.dumps(report, indent=2) + "\n")
    for name in ("target", "draft"):
        shutil.rmtree(out / name, ignore_errors=True)
        (staging / name).rename(out / name)
    (staging / "demo_build.json").replace(out / "demo_build.json")
    staging.rmdir()


if __name__ == "__main__":
    sys.exit(main())
