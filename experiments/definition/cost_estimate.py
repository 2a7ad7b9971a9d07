"""The experiment form's estimate of a plan's device-minutes, before it is submitted: the plan
as the form holds it (experiments/measurement/planning/device_cost.py counts it), priced with its worker
queue's recorded costs (experiments/analysis/device_time.py). Reads only."""

from experiments.analysis import device_time
from experiments.analysis.variance import ONE_SERVER_PER_RUN_METHODS
from experiments.definition.forms.arms import BaseArmFormSet
from experiments.definition.forms.experiment import ExperimentForm
from experiments.measurement.planning import device_cost
from experiments.measurement.planning.limits import Size
from experiments.models import Arm, Experiment

# The fields the estimate cannot do without; the others take their model defaults.
NEEDED = ("worker_queue", "concurrency_levels", "repetitions", "warmup_requests", "num_prompts", "max_tokens")


def missing(form: ExperimentForm) -> list[str]:
    """The labels of the needed fields that are not valid yet (both validated first)."""
    return [str(form[name].label) for name in NEEDED if form.cleaned_data.get(name) in (None, [])]


def _servers(form: ExperimentForm, arms: BaseArmFormSet) -> tuple[int, int, int]:
    """(servers of a first block, of an added block, of them a server per run), as
    definition.services.experiment_create adds the arms and the schedule gives them servers."""
    cleaned = form.cleaned_data
    speculative = [arm.cleaned_data for arm in arms.live_forms() if arm.cleaned_data.get("method")]
    drafts = {arm.get("model") for arm in speculative if arm["method"] == Arm.Method.DRAFT_MODEL}
    calibrations = len(drafts) if cleaned.get("draft_calibration") else 0
    sweeps = sum(len(arm.get("synthetic_sweep") or ()) for arm in speculative)
    compared = 1 + bool(cleaned.get("aa_replicate")) + len(speculative)
    per_run = sum(arm["method"] in ONE_SERVER_PER_RUN_METHODS for arm in speculative)
    return compared + calibrations + sweeps, compared, per_run


def form_plan(form: ExperimentForm, arms: BaseArmFormSet) -> device_cost.Plan:
    """The plan of the valid form (`missing` empty). Its design (first blocks, blocks added,
    the search's range) is read through an unsaved Experiment, so the model's rules decide it."""
    cleaned = form.cleaned_data
    design = Experiment(
        repetitions=cleaned["repetitions"],
        sequential=bool(cleaned.get("sequential")),
        server_per_block=bool(cleaned.get("server_per_block")),
        search_low=cleaned.get("search_low"),
        search_high=cleaned.get("search_high"),
        search_resolution=cleaned.get("search_resolution"),
    )
    servers, added, per_run = _servers(form, arms)
    size = Size(cleaned["warmup_requests"], cleaned["num_prompts"], cleaned["max_tokens"], cleaned.get("request_rate"))
    return device_cost.Plan(
        size=size,
        levels=tuple(cleaned["concurrency_levels"]),
        servers=servers,
        added_servers=added,
        per_run=per_run,
        max_blocks=design.repetitions,
        first_blocks=design.first_blocks,
        adds_blocks=design.adds_blocks,
        server_per_block=design.server_per_block,
        tensor_parallel_size=cleaned.get("tensor_parallel_size") or 1,
        search=design.search_range,
    )


def estimate_context(form: ExperimentForm, arms: BaseArmFormSet) -> dict:
    """What the estimate's panel shows: the fields still missing, or the plan's estimate with the
    queue's costs it rests on, each level's run time and the budget beside it."""
    needs = missing(form)
    if needs:
        return {"missing": needs}
    plan = form_plan(form, arms)
    queue = form.cleaned_data["worker_queue"]
    costs = device_time.queue_costs(queue)
    estimate = device_cost.estimate(plan, costs)
    levels = sorted({*plan.levels, *device_cost.added_levels(plan)})
    budget = form.cleaned_data.get("max_device_minutes")
    return {
        "plan": plan,
        "queue": queue,
        "costs": costs,
        "step_ms": costs.step.value * 1000,
        "estimate": estimate,
        "rows": _rows(estimate),
        "run_seconds": [(level, device_cost.run_seconds(plan.size, level, costs.step.value)) for level in levels],
        "budget": budget,
        "budget_blocks": None if budget is None else estimate.blocks_within(budget),
        "fits": budget is not None and estimate.fits(budget),
        "recent": {"starts": device_time.RECENT_STARTS, "runs": device_time.RECENT_RUNS},
    }


def _rows(estimate: device_cost.Estimate) -> list[tuple[str, int, device_cost.DeviceTime]]:
    """The table's rows: the least and the most, or the plan's one figure."""
    if not estimate.ranged:
        return [("the plan", estimate.most_blocks, estimate.most)]
    return [("at least", estimate.least_blocks, estimate.least), ("at most", estimate.most_blocks, estimate.most)]
