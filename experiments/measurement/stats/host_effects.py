"""The host in the analysis (issue 38): how much of the block log ratios' spread lies between
the hosts of a fleet, and whether one host's block ratios differ from the others' beyond chance.

Each block runs whole on one worker (experiments/models/fleet.py Block), so a block's ratio
compares the arms on one host. A block's value here is its log ratio averaged over the levels
it has a ratio at every one of (variance_components.block_ratios). Blocks are grouped by host;
a host with fewer than MIN_HOST_BLOCKS blocks has no spread of its own and is left out, and
nothing is estimated unless at least MIN_HOSTS hosts remain.

One-way analysis of variance of the block values by host (k hosts, N blocks, n_i per host):
  MS_between = Σ n_i (m_i − m)² / (k − 1),  MS_within = Σ_i Σ_b (y_b − m_i)² / (N − k),
  F = MS_between / MS_within on (k − 1, N − k) degrees of freedom, p = P(F_{k−1,N−k} ≥ F);
  σ_host² = (MS_between − MS_within) / n0 with n0 = (N − Σ n_i² / N) / (k − 1) (the ANOVA
  estimator of the random host effect, floored at 0). MS_within is then the spread of a block
  on one host: each host's noise floor pooled.
Over the arms of an experiment the p-values are adjusted by Holm's step-down (holm), so that
the chance of warning about any arm when no host differs is at most the level.

Plain Python and scipy (the F distribution); no Django.
"""

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from scipy import stats as scipy_stats

MIN_HOST_BLOCKS = 2
MIN_HOSTS = 2
HOST_TEST_LEVEL = 0.05

K = TypeVar("K")


def block_values(ratios: Mapping[int, Mapping[int, float]]) -> dict[int, float]:
    """{block: mean over levels of its log ratio} from {level: {block: ratio}}, for the blocks
    with a ratio at every level."""
    if not ratios:
        return {}
    blocks = set.intersection(*(set(by_block) for by_block in ratios.values()))
    return {
        block: sum(math.log(by_block[block]) for by_block in ratios.values()) / len(ratios) for block in sorted(blocks)
    }


@dataclass(frozen=True)
class HostEffect:
    """The one-way analysis by host, or why it was not done (`reason`).

    `hosts`: (host, blocks) of the hosts used, `means` their mean block value; `left_out`:
    (host, blocks) of hosts with too few blocks. `var_host_raw` is the unfloored estimator;
    `var_host` is it floored at 0."""

    hosts: tuple[tuple[str, int], ...] = ()
    means: tuple[tuple[str, float], ...] = ()
    left_out: tuple[tuple[str, int], ...] = ()
    ms_between: float | None = None
    ms_within: float | None = None
    df_between: int = 0
    df_within: int = 0
    f: float | None = None
    p: float | None = None
    var_host_raw: float | None = None
    var_host: float | None = None
    reason: str = ""

    @property
    def estimable(self) -> bool:
        return self.p is not None


def _groups(values: Mapping[int, float], hosts: Mapping[int, str]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for block, value in sorted(values.items()):
        host = hosts.get(block, "")
        if host:
            groups[host].append(value)
    return dict(groups)


def host_effect(values: Mapping[int, float], hosts: Mapping[int, str]) -> HostEffect:
    """The one-way analysis of `values` ({block: value}) grouped by `hosts` ({block: host});
    blocks without a host are left out."""
    groups = _groups(values, hosts)
    used = {host: ys for host, ys in groups.items() if len(ys) >= MIN_HOST_BLOCKS}
    used_counts = tuple(sorted((host, len(ys)) for host, ys in used.items()))
    left_out = tuple(sorted((host, len(ys)) for host, ys in groups.items() if host not in used))
    if len(used) < MIN_HOSTS:
        if len(groups) < 2:
            reason = "all blocks ran on one host" if groups else "no block with a ratio and a recorded host"
        else:
            reason = f"fewer than {MIN_HOSTS} hosts contributed at least {MIN_HOST_BLOCKS} blocks each"
        return HostEffect(used_counts, left_out=left_out, reason=reason)
    k = len(used)
    n = sum(len(ys) for ys in used.values())
    grand = sum(sum(ys) for ys in used.values()) / n
    means = {host: sum(ys) / len(ys) for host, ys in used.items()}
    ss_between = sum(len(ys) * (means[host] - grand) ** 2 for host, ys in used.items())
    ss_within = sum((y - means[host]) ** 2 for host, ys in used.items() for y in ys)
    df_between, df_within = k - 1, n - k
    ms_between, ms_within = ss_between / df_between, ss_within / df_within
    if ms_within > 0:
        f = ms_between / ms_within
        p = float(scipy_stats.f.sf(f, df_between, df_within))
    else:  # every host's blocks agree exactly: any difference between hosts is beyond chance
        f = math.inf if ms_between > 0 else math.nan
        p = 0.0 if ms_between > 0 else 1.0
    n0 = (n - sum(len(ys) ** 2 for ys in used.values()) / n) / df_between
    raw = (ms_between - ms_within) / n0
    return HostEffect(
        used_counts,
        tuple(sorted(means.items())),
        left_out,
        ms_between,
        ms_within,
        df_between,
        df_within,
        f,
        p,
        raw,
        max(0.0, raw),
    )


def farthest_host(effect: HostEffect) -> str:
    """The host whose mean block value lies farthest from the mean of the other hosts' blocks."""
    counts = dict(effect.hosts)
    total = sum(mean * counts[host] for host, mean in effect.means)
    n = sum(counts.values())

    def distance(item: tuple[str, float]) -> float:
        host, mean = item
        others = (total - mean * counts[host]) / (n - counts[host])
        return abs(mean - others)

    return max(effect.means, key=distance)[0] if effect.means else ""


def holm(pvalues: Mapping[K, float], *, level: float = HOST_TEST_LEVEL) -> dict[K, tuple[float, bool]]:
    """Holm's step-down: {key: (adjusted p, rejected at `level`)}. The adjusted p of the i-th
    smallest of m is max over j ≤ i of min(1, (m − j + 1) p_(j))."""
    ordered = sorted(pvalues.items(), key=lambda item: item[1])
    m = len(ordered)
    adjusted: dict[K, tuple[float, bool]] = {}
    running = 0.0
    for i, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - i) * p))
        adjusted[key] = (running, running <= level)
    return adjusted


def hosts_differ(effects: Mapping[K, HostEffect], *, level: float = HOST_TEST_LEVEL) -> dict[K, tuple[float, bool]]:
    """The page's decision: Holm over the keys (the arms) whose host effect was estimated,
    {key: (Holm-adjusted p, warn)}."""
    return holm({key: effect.p for key, effect in effects.items() if effect.p is not None}, level=level)
