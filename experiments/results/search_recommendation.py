"""What to deploy after a break-even search (experiments/analysis/search.py's answer): per band of
the searched range the arm to run or none, the --speculative-config that speculates only where it
pays, labelled derived until the search's confirmation arm has measured it, and the decision to
propose from it.

The search asks one question per arm, "up to which concurrency does it pay?", and its words are
family-wise controlled over the levels it measured; the bands read them under the search's own
assumption that the speedup falls with concurrency: a found break-even (settled faster at the
bracket's lower level, not faster at its upper one) gives the band up to the lower level to the
arm and the band from the upper level on to plain decoding. Between them the break-even lies,
at the resolution the experiment asked for. An arm whose guard of the service's objective fails
(or is not shown) at a level of that band is not run there (experiments/measurement/stats/
objective.py): the search places its levels on the primary metric, the deployment on the
service's words.
"""

from collections.abc import Sequence
from urllib.parse import urlencode

from django.urls import reverse

from experiments.measurement.planning import planner
from experiments.measurement.stats import objective, sequential
from experiments.models import Arm, Experiment
from experiments.rules import commands


def _pays_for_the_service(arm: dict, cells: Sequence[dict]) -> bool:
    """No measured level of the band the arm would run in (up to its break-even's lower level,
    the whole range where it pays everywhere) has a guard of the service's objective against it:
    none whose joint word is "costs", none called faster on the primary whose guards were not
    shown ("open" or "inconclusive" for the service). A level left open on the primary stays to
    the search's assumption that the speedup falls with concurrency. Cells stored before
    objectives have no joint word: their primary word is the service's."""
    top = arm["below"] if arm["state"] == planner.FOUND else None
    for cell in cells:
        joint = cell.get("joint")
        if not joint or cell["arm_id"] != arm["arm_id"] or (top is not None and cell["level"] > top):
            continue
        unshown = cell["outcome"] == sequential.FASTER and joint["word"] != objective.PAYS
        if joint["word"] == objective.COSTS or unshown:
            return False
    return True


def _best(arms: list[dict], cells: Sequence[dict] = ()) -> dict | None:
    """The arm that pays furthest: the highest level it is settled faster at, with no break-even
    in the range counting as the range's top, among the arms whose guards hold in that band."""
    paying = [
        arm for arm in arms
        if arm["state"] in (planner.FOUND, planner.PAYS_EVERYWHERE) and _pays_for_the_service(arm, cells)
    ]  # fmt: skip
    return max(paying, key=lambda arm: (arm["below"] or 0, -arm["arm_id"]), default=None)


def _bands(search: dict, best: dict | None, arms: list[dict]) -> list[dict]:
    if best is None:
        if arms and all(arm["state"] == planner.PAYS_NOWHERE for arm in arms):
            return [{"low": search["low"], "high": search["high"], "word": "no speculation", "arm": ""}]
        return [{"low": search["low"], "high": search["high"], "word": "undecided", "arm": ""}]
    if best["state"] == planner.PAYS_EVERYWHERE:
        return [{"low": search["low"], "high": search["high"], "word": "run arm", "arm": best["arm"]}]
    bands = [
        {"low": search["low"], "high": best["below"], "word": "run arm", "arm": best["arm"]},
        {"low": best["below"] + 1, "high": best["above"] - 1, "word": "break-even", "arm": best["arm"]},
        {"low": best["above"], "high": search["high"], "word": "no speculation", "arm": ""},
    ]
    return [band for band in bands if band["low"] <= band["high"]]  # neighbours 1 and 2 leave nothing between


def _confirmed(best: dict | None, arms: dict[int, Arm]) -> Arm | None:
    """The confirmation arm whose derived schedule was confirmed, for the best arm."""
    confirmation = best.get("confirmation") if best else None
    if not confirmation or confirmation["verdict"] != "confirmed":
        return None
    return arms.get(confirmation["arm_id"])


def page_context(*, experiment: Experiment, question: dict) -> dict:
    """{"recommendation": ...} for a search's page."""
    search = question["search"]
    best = _best(search["arms"], question.get("cells") or [])
    arms = {arm.id: arm for arm in experiment.arms.all()}
    confirmed = _confirmed(best, arms)
    return {
        "recommendation": {
            "search": True,
            "bands": _bands(search, best, search["arms"]),
            "confirmation": best.get("confirmation") if best else None,
            "confirmed": confirmed is not None,
            "derived": {"arm": best["arm"], "config": best["derived"], "because": best["unconfirmed_because"]}
            if best and best.get("derived")
            else None,
            "propose_url": reverse("experiments:decision_new") + "?" + urlencode(
                _proposal(experiment, search, best, arms, confirmed), doseq=True
            ),
        }
    }  # fmt: skip


def _proposal(
    experiment: Experiment, search: dict, best: dict | None, arms: dict[int, Arm], confirmed: Arm | None
) -> dict:
    """The decision form's prefill: deploy the confirmed schedule up to the level the confirmation
    measured; else the arm itself up to its break-even's lower level (or the range's top); do not
    deploy when every arm pays nowhere in the range; else more data is needed. The evidence is
    this experiment."""
    words = "; ".join(f"{arm['arm']}: {arm['sentence']}" for arm in search["arms"])
    rationale = f"From experiment #{experiment.pk}'s break-even search over {search['low']}-{search['high']} ({words})."
    fields: dict = {"experiments": [experiment.pk], "metric": experiment.primary_metric}
    if confirmed is not None and best is not None:
        fields |= {"kind": "deploy", "arm": confirmed.id, "max_concurrency": best["above"]}
        rationale += (
            f" The derived schedule was confirmed by {confirmed.label}: "
            f"{commands.speculative_config_flag(confirmed.speculative_config() or {})} speculates up to the "
            "break-even and not above it."
        )
    elif best is not None:
        upto = search["high"] if best["state"] == planner.PAYS_EVERYWHERE else best["below"]
        fields |= {"kind": "deploy", "arm": best["arm_id"], "max_concurrency": upto}
        if best.get("derived"):
            rationale += f" Derived, to confirm as an arm first: {commands.speculative_config_flag(best['derived'])}."
    elif search["arms"] and all(arm["state"] == planner.PAYS_NOWHERE for arm in search["arms"]):
        fields["kind"] = "do_not_deploy"
    else:
        fields["kind"] = "needs_more_data"
    return {**fields, "rationale": rationale}
