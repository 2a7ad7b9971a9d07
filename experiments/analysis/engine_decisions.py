"""What vLLM decided for each arm's servers, as their logs said (workers/server/engine_report.py,
stored on the runs' EnvironmentSnapshot), and the sentences that flag an arm whose model runner,
async scheduling, CUDA graphs or KV-cache size differ from the baseline's: that difference is
then mixed into the arm's speedup, beside speculation's own effect. The protocol card shows them
per arm (experiments/results/selectors.py) and the verdict's warnings repeat them
(experiments/analysis/page_warnings.py), with a worker whose vLLM ran without FlashInfer's kernels."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from experiments.models import Arm, EnvironmentSnapshot, Experiment

FIELDS = ("model_runner", "async_scheduling", "cuda_graphs", "kv_cache_tokens")
NOT_LOGGED = "not logged"


@dataclass(frozen=True)
class EngineDecision:
    """One server's decisions ("" or None where its log did not say), with the lines they came from."""

    model_runner: str
    async_scheduling: bool | None
    cuda_graphs: str
    kv_cache_tokens: int | None
    log_lines: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    # "disabled" or "kernels missing" where vLLM said so (workers/server/engine_report.py; kept
    # only as its line in engine_log_lines), else "".
    flashinfer: str = ""

    @property
    def recorded(self) -> bool:
        """False on runs stored before the logs were read: nothing is known, not "not logged"."""
        return any(getattr(self, name) not in ("", None) for name in FIELDS)

    @property
    def runner_text(self) -> str:
        return f"Model Runner {self.model_runner}" if self.model_runner else f"model runner {NOT_LOGGED}"

    @property
    def scheduling_text(self) -> str:
        return scheduling_text(self.async_scheduling)

    @property
    def graphs_text(self) -> str:
        return graphs_text(self.cuda_graphs) if self.cuda_graphs else f"CUDA graphs {NOT_LOGGED}"

    @property
    def kv_cache_text(self) -> str:
        tokens = self.kv_cache_tokens
        return f"KV cache {tokens:,} tokens" if tokens is not None else f"KV cache size {NOT_LOGGED}"

    def as_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in FIELDS} | {"log_lines": self.log_lines}


def flashinfer_state(log_lines: dict[str, str]) -> str:
    """What vLLM's FlashInfer line (engine_log_lines["flashinfer"]) said: "" without one."""
    line = log_lines.get("flashinfer", "")
    if not line:
        return ""
    return "disabled" if line.startswith("FlashInfer kernels are disabled") else "kernels missing"


def scheduling_text(value: bool | None) -> str:
    return {True: "async scheduling on", False: "async scheduling off", None: f"async scheduling {NOT_LOGGED}"}[value]


def graphs_text(value: str) -> str:
    return f"CUDA graphs {value}" if value in ("on", "off") else f"CUDA graphs on ({value})"


def arm_decisions(*, experiment: Experiment) -> dict[int, list[EngineDecision]]:
    """Per arm id, the distinct decisions its servers' logs recorded, in the order the runs ran."""
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment).order_by("run__started_at", "run_id")
    decisions: dict[int, list[EngineDecision]] = defaultdict(list)
    for row in snapshots.values("run__arm_id", *FIELDS, "engine_log_lines"):
        decision = EngineDecision(
            model_runner=row["model_runner"],
            async_scheduling=row["async_scheduling"],
            cuda_graphs=row["cuda_graphs"],
            kv_cache_tokens=row["kv_cache_tokens"],
            log_lines=row["engine_log_lines"],
            flashinfer=flashinfer_state(row["engine_log_lines"]),
        )
        if decision.recorded and decision not in decisions[row["run__arm_id"]]:
            decisions[row["run__arm_id"]].append(decision)
    return decisions


def experiment_flags(experiment: Experiment) -> list[str]:
    """Every arm's flags against the baseline (arm_flags), then one line per FlashInfer state
    vLLM reported on this experiment's servers: the verdict's warnings (page_warnings.py)."""
    decisions = arm_decisions(experiment=experiment)
    arms = list(experiment.arms.order_by("position"))
    baseline = next((decisions.get(arm.id, []) for arm in arms if arm.is_baseline), [])
    flags = [flag for arm in arms for flag in arm_flags(arm, decisions.get(arm.id, []), baseline)]
    return flags + _flashinfer_warnings(arms, decisions)


def _flashinfer_warnings(arms: list[Arm], decisions: dict[int, list[EngineDecision]]) -> list[str]:
    """vLLM says so only where some code asks for FlashInfer, so an arm's line and a baseline's
    silence are no difference between them: the warning is about the worker, not the arm."""
    warnings = []
    for state in ("disabled", "kernels missing"):
        said = [arm.label for arm in arms if any(d.flashinfer == state for d in decisions.get(arm.id, []))]
        if said:
            line = next(
                d.log_lines["flashinfer"] for a in arms for d in decisions.get(a.id, []) if d.flashinfer == state
            )
            warnings.append(
                f"vLLM ran without FlashInfer's precompiled kernels on this worker ({state}; servers of "
                f"{', '.join(said)}: “{line}”): its kernels, start-up time and so its speedups may differ from a host "
                "that has them. `vllm download-kernels` in the worker's vLLM environment installs them "
                "(`./dev check-host` says so)."
            )
    return warnings


def _known(decisions: Iterable[EngineDecision], name: str) -> set:
    return {getattr(d, name) for d in decisions} - {"", None}


def _joined(values: Iterable[str]) -> str:
    return " and ".join(sorted(values))


def arm_flags(arm: Arm, decisions: list[EngineDecision], baseline: list[EngineDecision]) -> list[str]:
    """Where the arm's servers decided otherwise than the baseline's; nothing for the baseline
    itself, a calibration arm (never compared), or an arm or baseline with nothing recorded."""
    if arm.is_baseline or arm.is_calibration or not decisions or not baseline:
        return []
    flags = []
    runners, baseline_runners = _known(decisions, "model_runner"), _known(baseline, "model_runner")
    if runners and baseline_runners and runners != baseline_runners:
        flags.append(
            f"{arm.label} ran on Model Runner {_joined(runners)} while the baseline ran on "
            f"{_joined(baseline_runners)}: a runner difference is mixed into its speedup."
        )
    flags += _scheduling_flags(arm.label, decisions, baseline)
    graphs, baseline_graphs = _known(decisions, "cuda_graphs"), _known(baseline, "cuda_graphs")
    if graphs and baseline_graphs and graphs != baseline_graphs:
        flags.append(
            f"{arm.label} ran with {_joined(map(graphs_text, graphs))} while the baseline ran with "
            f"{_joined(map(graphs_text, baseline_graphs))}: a CUDA-graph difference is mixed into its speedup."
        )
    return flags + _kv_cache_flags(arm.label, decisions, baseline)


# KV-cache sizes within this share of each other hold the same requests for all practical purposes.
KV_CACHE_TOLERANCE = 0.05


def _kv_cache_flags(label: str, decisions: list[EngineDecision], baseline: list[EngineDecision]) -> list[str]:
    """An arm whose servers hold fewer (or more) KV-cache tokens than the baseline's: a draft
    model's weights and KV cache come out of the same memory budget, so at a concurrency the
    baseline's cache holds, the arm's requests may queue or be preempted."""
    arm_tokens, baseline_tokens = _known(decisions, "kv_cache_tokens"), _known(baseline, "kv_cache_tokens")
    if not arm_tokens or not baseline_tokens:
        return []
    fewest, base = min(arm_tokens), min(baseline_tokens)
    if abs(fewest - base) <= KV_CACHE_TOLERANCE * base:
        return []
    change = (fewest - base) / base
    return [
        f"{label}'s servers hold {fewest:,} KV-cache tokens against the baseline's {base:,} ({change:+.0%}): at a "
        "concurrency the baseline's cache holds, its requests may queue or be preempted, so its per-token speedup "
        "need not carry over to capacity (the question's capacity guard)."
    ]


# vLLM 0.32 says when it turns async scheduling off (config/vllm.py), never when it turns it on.
UNLOGGED_ON = "vLLM's default is on, and vLLM logs nothing when it is on"


def _scheduling_flags(label: str, decisions: list[EngineDecision], baseline: list[EngineDecision]) -> list[str]:
    """Known on both sides: flagged where they differ. Off with vLLM's line on one side and not
    logged on the other: flagged as likely, since only turning it off is logged."""
    arm_values, baseline_values = _known(decisions, "async_scheduling"), _known(baseline, "async_scheduling")
    if arm_values and baseline_values:
        if arm_values == baseline_values:
            return []
        arm_text = _joined(map(scheduling_text, arm_values))
        return [
            f"{label} ran with {arm_text} while the baseline ran with "
            f"{_joined(map(scheduling_text, baseline_values))}: a scheduling difference is mixed into its speedup."
        ]
    if arm_values == {False}:
        return [
            f"{label} ran without async scheduling (vLLM: “{_off_line(decisions)}”) while the baseline's server "
            f"logged nothing that turned it off ({UNLOGGED_ON}): a scheduling difference is likely mixed into its "
            "speedup."
        ]
    if baseline_values == {False}:
        return [
            f"The baseline ran without async scheduling (vLLM: “{_off_line(baseline)}”) while the server of "
            f"{label} logged nothing that turned it off ({UNLOGGED_ON}): a scheduling difference is likely mixed "
            "into its speedup."
        ]
    return []


def _off_line(decisions: list[EngineDecision]) -> str:
    return next(d.log_lines.get("async_scheduling", "") for d in decisions if d.async_scheduling is False)
