"""Step accounting: how many engine steps an arm's requests took, how many tokens a step
yielded, what a step cost, and what it cost in the baseline's steps at the same level.

Speculation pays in the decode phase only when a step's extra tokens outweigh its extra
cost: the decode-phase speedup is tokens per step / relative step cost. The two factors
come apart here, so the page can say which one moved when a speedup shrinks as batches
grow. Everything comes from what each request recorded (TTFT, E2E, output tokens and
vLLM's per-step accepted counts and its own decode time); nothing is fitted.

Django-free, so it can be checked on hand-made records; experiments/analysis/series.py reads the
request rows and stores `step_accounting` in the analysis' series. Definitions:
docs/metrics.md ("Step accounting") and the page.
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from experiments.measurement.stats import acceptance, intervals


@dataclass(frozen=True)
class RequestSteps:
    """One measured request that succeeded, as the step accounting sees it.

    `accepted_per_step` is vLLM's per-request `per_step_accepted` (None where it was not
    reported); `speculative` says whether the arm speculates, since without that list a
    speculative request's steps are unknown, while a plain one's are output tokens - 1.
    `server_decode_ms`: vLLM's `generation_time_ms`, the engine's time from the first output
    token to the last, timed where the steps run; None for records made without it.
    `first_chunk_tokens`: the tokens of its first streamed chunk, needed only without
    `server_decode_ms`. A fast server (a small draft model served alone) can get ahead of the
    client, which then reads several tokens in the first chunk (their decode steps ran before
    the TTFT, not inside E2E - TTFT) or the whole output at once (no decode time at all).
    """

    arm: int
    level: int
    block: int
    output_tokens: int
    ttft_ms: float | None
    e2e_ms: float | None
    accepted_per_step: Sequence[int] | None
    speculative: bool
    server_decode_ms: float | None = None
    first_chunk_tokens: int = 1


@dataclass
class Totals:
    """Sums over the requests of one run: tokens after the first, decode steps, decode time."""

    requests: int = 0
    tokens: int = 0
    steps: int = 0
    decode_ms: float = 0.0

    def add(self, tokens: int, steps: int, decode_ms: float) -> None:
        self.requests += 1
        self.tokens += tokens
        self.steps += steps
        self.decode_ms += decode_ms

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps

    @property
    def step_ms(self) -> float:
        return self.decode_ms / self.steps


def decode_phase(request: RequestSteps) -> tuple[int, int, float] | None:
    """(tokens timed, decode steps timed, decode time) of one request: the tokens after the
    first, their steps and the engine's time for them (`server_decode_ms`).

    A record without the engine's time falls back to the client's E2E - TTFT, and then,
    for plain decoding, to the tokens after the first chunk.

    None when the request has no decode phase (one output token: prefill made it; or, timed
    at the client, every token in the first chunk), lacks a timing, or speculated without
    reporting its steps.
    """
    if request.output_tokens <= 1:
        return None
    if request.speculative and request.accepted_per_step is None:
        return None
    tokens = request.output_tokens - 1
    steps = acceptance.decode_steps(request.output_tokens, request.accepted_per_step)
    if request.server_decode_ms is not None:
        return tokens, steps, request.server_decode_ms
    if request.ttft_ms is None or request.e2e_ms is None:
        return None
    if request.accepted_per_step is None:
        # Plain decoding, a token a step; the steps that ran before the first chunk arrived are not timed.
        timed = request.output_tokens - max(1, request.first_chunk_tokens)
        return (timed, timed, request.e2e_ms - request.ttft_ms) if timed > 0 else None
    return tokens, steps, request.e2e_ms - request.ttft_ms


def run_totals(requests: Iterable[RequestSteps]) -> dict[tuple[int, int], dict[int, Totals]]:
    """{(arm, level): {block: totals}}, keeping only runs with decode time to divide."""
    totals: dict[tuple[int, int], dict[int, Totals]] = defaultdict(lambda: defaultdict(Totals))
    for request in requests:
        phase = decode_phase(request)
        if phase is not None:
            totals[(request.arm, request.level)][request.block].add(*phase)
    return {
        cell: {block: t for block, t in blocks.items() if t.decode_ms > 0}
        for cell, blocks in totals.items()
        if any(t.decode_ms > 0 for t in blocks.values())
    }


def geometric_mean(values: Sequence[float]) -> float:
    """Of positive values: across blocks, as the speedups' points are, so that the ratios of
    geometric means below equal the geometric means of the block ratios."""
    return math.exp(statistics.fmean(math.log(v) for v in values))


@dataclass(frozen=True)
class StepRow:
    """One arm at one level. Figures are per block (ratios of sums over the block's requests),
    then geometric means over `blocks`; for a compared arm, the blocks the baseline also ran
    at that level, so that relative_cost = step_ms / baseline_step_ms and
    margin = tokens_per_step / relative_cost hold exactly."""

    arm: int
    level: int
    blocks: int
    requests: int
    steps: int
    tokens_per_step: float
    step_ms: float
    baseline_step_ms: float | None = None
    relative_cost: intervals.RatioEstimate | None = None
    margin: intervals.RatioEstimate | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "arm_id": self.arm, "level": self.level, "blocks": self.blocks, "requests": self.requests,
            "steps": self.steps, "tokens_per_step": self.tokens_per_step, "step_ms": self.step_ms,
            "baseline_step_ms": self.baseline_step_ms,
            "relative_cost": _estimate_json(self.relative_cost), "margin": _estimate_json(self.margin),
        }  # fmt: skip


def _estimate_json(estimate: intervals.RatioEstimate | None) -> dict[str, Any] | None:
    if estimate is None:
        return None
    return {
        "point": estimate.point, "lo": estimate.lo, "hi": estimate.hi,
        "block_ratios": list(estimate.block_ratios), "note": estimate.note,
    }  # fmt: skip


def _row(arm: int, level: int, own: dict[int, Totals], base: dict[int, Totals] | None) -> StepRow:
    """The row of an arm from its runs; compared with `base` (the baseline's runs at the
    level) over the blocks both ran, or on its own blocks when there is no baseline."""
    blocks = sorted(own.keys() & base.keys()) if base else []
    used = blocks or sorted(own)
    row = StepRow(
        arm=arm,
        level=level,
        blocks=len(used),
        requests=sum(own[b].requests for b in used),
        steps=sum(own[b].steps for b in used),
        tokens_per_step=geometric_mean([own[b].tokens_per_step for b in used]),
        step_ms=geometric_mean([own[b].step_ms for b in used]),
    )
    if not blocks:
        return row
    assert base is not None  # `blocks` are the ones both ran
    costs = [own[b].step_ms / base[b].step_ms for b in blocks]
    margins = [own[b].tokens_per_step / cost for b, cost in zip(blocks, costs, strict=True)]
    return replace(
        row,
        baseline_step_ms=geometric_mean([base[b].step_ms for b in blocks]),
        relative_cost=intervals.block_interval(costs),
        margin=intervals.block_interval(margins),
    )


def step_accounting(requests: Iterable[RequestSteps], *, baseline: int, arms: Sequence[int]) -> list[StepRow]:
    """The baseline's row and every compared arm's, per level, in the order of `arms` then level.

    Requests with no decode phase (see decode_phase) are left out; an arm or level without
    any has no row.
    """
    totals = run_totals(requests)
    rows = []
    for arm in (baseline, *arms):
        for (cell_arm, level), own in sorted(totals.items()):
            if cell_arm == arm:
                base = totals.get((baseline, level)) if arm != baseline else None
                rows.append(_row(arm, level, own, base))
    return rows


# ---------------------------------------------------------------- the page's sentence


def _percent(margin: float) -> str:
    return f"{margin - 1:+.0%}".replace("-", "−")


def _outcome(margin: intervals.RatioEstimate) -> str:
    if not margin.has_interval:
        return " (one block: no interval)"
    _, lo, hi = margin.interval
    interval = f" [{_percent(lo)}, {_percent(hi)}]"
    if lo > 1:
        return f"{interval}, so the extra tokens pay for the dearer step"
    if hi < 1:
        return f"{interval}, so they do not pay for it"
    return f"{interval}, not told apart from break-even"


def _clause(row: StepRow) -> str:
    cost, margin = row.relative_cost, row.margin
    # sentence() passes the compared rows, to which _row gives both, each from at least one block.
    assert cost is not None
    assert margin is not None
    assert margin.point is not None
    cost_interval = f" [{cost.lo:.2f}, {cost.hi:.2f}]" if cost.has_interval else ""
    ahead = "more" if margin.point >= 1 else "less"
    return (
        f"at concurrency {row.level} a step costs {cost.point:.2f} baseline steps{cost_interval} and yields "
        f"{row.tokens_per_step:.2f} tokens, {abs(margin.point - 1):.0%} {ahead} than it costs{_outcome(margin)}"
    )


def sentence(label: str, rows: Sequence[StepRow]) -> str:
    """What the page says of one compared arm: per level, the step's relative cost, its yield
    and by how much the yield exceeds the cost (a speedup of the decode phase) or falls short."""
    compared = [row for row in rows if row.margin is not None]
    if not compared:
        return f"{label}: no level where both it and the baseline recorded decode steps."
    return f"{label}: " + "; ".join(_clause(row) for row in compared) + "."
