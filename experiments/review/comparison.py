"""The comparison page: arms picked from two or more experiments, their stored speedups and
run summaries side by side, and every difference between the experiments' protocols.

An arm's speedup is only ever the one its own experiment stored: over its own baseline, in
the same blocks, on the same host. Nothing here divides one experiment's arm by another
experiment's baseline; absolute figures are shown as such, labelled when hosts differ.
"""

import json
from collections import defaultdict
from dataclasses import dataclass

from experiments.analysis.verdict_grid import SPEEDUP_METRICS
from experiments.measurement.stats.differences import (
    Difference,
    Protocol,
    alike,
    differences,
    hardware_label,
    shared_levels,
)
from experiments.models import Arm, EnvironmentSnapshot, Experiment, SpeedupEstimate
from experiments.results import block as results
from experiments.results import block_selectors
from experiments.results.block import ArmStyle, Cell, Spread
from experiments.rules import server_settings

MAX_EXPERIMENTS = 6
# Line styles tell the experiments apart; colours tell the arm configurations apart, so the
# same configuration in two experiments has one colour and two dash patterns.
DASHES: tuple[list[int], ...] = ([], [8, 4], [2, 3], [12, 4, 2, 4], [1, 6], [16, 4])
DASH_NAMES = ("solid", "dashed", "dotted", "dash-dot", "sparse dots", "long dashes")
# (summary column, name, unit) of the absolute figures shown
ABSOLUTE = (
    ("tpot_p50_ms", "TPOT p50", "ms"),
    ("e2e_p50_ms", "End-to-end latency p50", "ms"),
    ("output_throughput", "Output throughput", "tokens/s"),
)
ENVIRONMENT_FIELDS = (
    "run__experiment_id", "vllm_version", "torch_version", "python_version", "gpu_driver", "cuda_version", "gpu_name",
    "gpu_count", "cpu_model", "host_name", "cpu_binding",
)  # fmt: skip


@dataclass(frozen=True)
class ComparedArm:
    """An arm as the comparison shows it: its experiment's line style, its configuration's colour."""

    style: ArmStyle
    arm: Arm
    experiment: Experiment
    dash: tuple[int, ...]
    dash_name: str

    @property
    def config_json(self) -> str:
        return json.dumps(self.arm.speculative_config()) if self.arm.is_speculative else ""


def _runtime(snapshot: dict) -> str:
    parts = [f"torch {snapshot['torch_version'] or '?'}", f"Python {snapshot['python_version'] or '?'}"]
    if snapshot["gpu_count"]:
        parts += [f"driver {snapshot['gpu_driver'] or '?'}", f"CUDA {snapshot['cuda_version'] or '?'}"]
    return " · ".join(parts)


def _binding(record: dict) -> str:
    text = f"engine on cores {record.get('engine_cores', '?')}, client on {record.get('client_cores', '?')}"
    placed = record.get("placement") or {}
    for role, name in (("api_server", "API server"), ("engine_core", "engine core")):
        if role in placed:
            text += f", {name} on {placed[role]}"
    return text


def _recorded(snapshots: list[dict], value) -> tuple[str, ...]:
    return tuple(sorted({value(s) for s in snapshots} - {""}))


def protocol_of(experiment: Experiment, snapshots: list[dict]) -> Protocol:
    """The experiment's settings, and what its runs' environment snapshots recorded."""
    e = experiment
    workload = (
        f"synthetic prompts of {e.input_lengths or e.synthetic_input_len} words"
        if e.workload_kind == Experiment.WorkloadKind.SYNTHETIC
        else f"prompt set {e.prompt_set}" + (f", its prompts of {e.input_lengths} words" if e.input_lengths else "")
    ) + (" through the chat endpoint" if e.endpoint == Experiment.Endpoint.CHAT else "")
    return Protocol(
        label=f"#{e.pk} {e.name}", target_model=e.target_model, dtype=e.dtype, max_model_len=e.max_model_len,
        tensor_parallel_size=e.tensor_parallel_size, server_settings=server_settings.describe(e.server_setting_values),
        worker_queue=e.worker_queue, requested_vllm_version=e.requested_vllm_version,
        vllm_versions=_recorded(snapshots, lambda s: s["vllm_version"]),
        runtime=_recorded(snapshots, _runtime),
        hardware=_recorded(
            snapshots,
            lambda s: hardware_label(gpu_name=s["gpu_name"], gpu_count=s["gpu_count"], cpu_model=s["cpu_model"]),
        ),
        hosts=_recorded(snapshots, lambda s: s["host_name"]),
        cpu_binding=_recorded(snapshots, lambda s: _binding(s["cpu_binding"]) if s["cpu_binding"] else ""),
        workload=workload, prompt_set_hash=e.prompt_set_hash, num_prompts=e.num_prompts,
        warmup_requests=e.warmup_requests, max_tokens=e.max_tokens, ignore_eos=e.ignore_eos, temperature=e.temperature,
        top_p=e.top_p, seed=e.seed, request_rate=e.request_rate, concurrency_levels=tuple(sorted(e.concurrency_levels)),
        repetitions=e.repetitions, server_per_block=e.server_per_block, aa_replicate=e.aa_replicate,
        draft_calibration=e.draft_calibration,
        equivalence_margin=e.equivalence_margin, slos=tuple(e.slo_labels),
    )  # fmt: skip


def _config_key(arm: Arm) -> str:
    if arm.is_baseline:
        return "baseline"
    if arm.is_replicate:
        return "replicate"
    return json.dumps(arm.speculative_config(), sort_keys=True)


def compared_arms(experiments: list[Experiment], arms: list[Arm]) -> list[ComparedArm]:
    """The arms in experiment order, then position; one colour per configuration."""
    index = {experiment.id: i for i, experiment in enumerate(experiments)}
    by_id = {experiment.id: experiment for experiment in experiments}
    colours = {"baseline": results.BASELINE_COLOUR, "replicate": results.REPLICATE_COLOUR}
    styled = []
    for arm in sorted(arms, key=lambda a: (index[a.experiment_id], a.position)):
        key = _config_key(arm)
        colour = colours.setdefault(key, results.ARM_COLOURS[(len(colours) - 2) % len(results.ARM_COLOURS)])
        i = index[arm.experiment_id]
        style = ArmStyle(
            arm.id, f"#{arm.experiment_id} {arm.label}", arm.is_baseline, colour, arm.is_replicate, arm.is_speculative
        )
        styled.append(ComparedArm(style, arm, by_id[arm.experiment_id], tuple(DASHES[i]), DASH_NAMES[i]))
    return styled


@dataclass(frozen=True)
class Comparison:
    experiments: list[Experiment]
    protocols: list[Protocol]
    arms: list[ComparedArm]  # the picked ones
    choices: list[tuple[Experiment, list[ComparedArm]]]  # every arm of every experiment, for the picker
    speedups: dict[tuple[int, int, str], SpeedupEstimate]
    cells: dict[tuple[int, int], Cell]

    @property
    def experiment_rows(self) -> list[tuple[Experiment, Protocol, ComparedArm]]:
        """Each experiment with its protocol and its first arm (which carries its line style)."""
        return [(e, p, arms[0]) for (e, arms), p in zip(self.choices, self.protocols, strict=True) if arms]

    @property
    def differences(self) -> list[Difference]:
        return differences(self.protocols)

    @property
    def alike(self) -> list[str]:
        return alike(self.protocols)

    @property
    def levels(self) -> list[int]:
        return sorted({level for p in self.protocols for level in p.concurrency_levels})

    @property
    def shared_levels(self) -> list[int]:
        return shared_levels(self.protocols)

    @property
    def hosts(self) -> list[str]:
        return sorted({host for p in self.protocols for host in p.hosts})

    @property
    def speedup_arms(self) -> list[ComparedArm]:
        """The picked arms that have a speedup: every arm but the baselines."""
        return [arm for arm in self.arms if not arm.style.is_baseline]

    @property
    def speedup_tables(self) -> list[tuple[str, str, list[tuple[int, list[SpeedupEstimate | None]]]]]:
        """Per verdict metric (value, name): per level, each speedup arm's stored estimate
        (None where there is none, e.g. a level its experiment did not measure)."""
        return [
            (
                str(metric),
                SpeedupEstimate.Metric(metric).label,
                [
                    (level, [self.speedups.get((arm.arm.id, level, metric)) for arm in self.speedup_arms])
                    for level in self.levels
                ],
            )
            for metric in SPEEDUP_METRICS
        ]

    @property
    def absolute_tables(self) -> list[tuple[str, str, str, list[tuple[int, list[Spread | None]]]]]:
        """Per absolute figure (column, name, unit): per level, each picked arm's spread over its runs."""
        return [
            (
                column,
                name,
                unit,
                [(level, [self._spread(arm, level, column) for arm in self.arms]) for level in self.levels],
            )
            for column, name, unit in ABSOLUTE
        ]

    def _spread(self, arm: ComparedArm, level: int, column: str) -> Spread | None:
        cell = self.cells.get((arm.arm.id, level))
        return cell.spread[column] if cell else None

    def chart_data(self) -> dict:
        """What static/js/compare.js draws."""
        return {
            "levels": self.levels,
            "hosts_differ": len(self.hosts) > 1,
            "arms": [
                {
                    "id": a.arm.id,
                    "label": a.style.label,
                    "colour": a.style.colour,
                    "dash": list(a.dash),
                    "dash_name": a.dash_name,
                    "baseline": a.style.is_baseline,
                }
                for a in self.arms
            ],
            "speedups": [s.chart_point() for s in self.speedups.values()],
            "absolute": [
                {"arm": arm_id, "level": level} | {column: cell.spread[column].as_list() for column, _, _ in ABSOLUTE}
                for (arm_id, level), cell in self.cells.items()
            ],
        }


def _environment(experiments: list[Experiment]) -> dict[int, list[dict]]:
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment__in=experiments)
    by_experiment = defaultdict(list)
    for row in snapshots.values(*ENVIRONMENT_FIELDS).distinct():
        by_experiment[row["run__experiment_id"]].append(row)
    return by_experiment


def comparison(*, experiments: list[Experiment], arm_ids: list[int] | None = None) -> Comparison:
    """The comparison of the experiments (in the order given) on the picked arms (all arms
    without a pick): a query for the arms, one for the environments, one for the speedups,
    one per experiment for its run summaries."""
    all_arms = compared_arms(experiments, list(Arm.objects.compared_or_baseline().filter(experiment__in=experiments)))
    picked = [arm for arm in all_arms if arm_ids is None or arm.arm.id in arm_ids]
    environment = _environment(experiments)
    speedups = SpeedupEstimate.objects.filter(arm__in=[a.arm for a in picked], metric__in=SPEEDUP_METRICS)
    picked_ids = {arm.arm.id for arm in picked}
    cells = {}
    for experiment in {arm.experiment for arm in picked}:
        styles = [arm.style for arm in all_arms if arm.experiment == experiment]
        for cell in block_selectors.summary_cells(experiment=experiment, arms=styles):
            if cell.arm.id in picked_ids:
                cells[(cell.arm.id, cell.level)] = cell
    return Comparison(
        experiments=experiments,
        protocols=[protocol_of(e, environment[e.id]) for e in experiments],
        arms=picked,
        choices=[(e, [arm for arm in all_arms if arm.experiment == e]) for e in experiments],
        speedups={(s.arm_id, s.concurrency, s.metric): s for s in speedups},
        cells=cells,
    )
