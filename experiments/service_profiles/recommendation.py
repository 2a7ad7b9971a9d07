"""The profile page's recommendation: per concurrency band of the service's load, what to run,
from the evidence the selector read (experiments/service_profiles/selectors.py) by the rules of
experiments/measurement/deploy/service_bands.py; and the "propose this as a decision" link, which
fills the decision form (experiments/review/decision_views.decision_new) with the service, the
proposal and every experiment the bands rest on as evidence."""

from urllib.parse import urlencode

from django.urls import reverse

from experiments.measurement.deploy import service_bands
from experiments.models import ServiceProfile
from experiments.service_profiles.selectors import ProfileEvidence


def _span(band: service_bands.Band) -> str:
    return f"{band.low}" if band.low == band.high else f"{band.low}–{band.high}"


def _edges(index: int, bands: list[service_bands.Band]) -> str:
    """Which of the band's edges were measured, and where an unmeasured band lies."""
    band = bands[index]
    if band.levels:
        measured = f"measured at {', '.join(str(level.level) for level in band.levels)}"
        between = band.high - band.low + 1 > len(band.levels)
        return measured + ("; the concurrencies between take the answer of both neighbours" if between else "")
    below = bands[index - 1].levels[-1].level if index > 0 else None
    above = bands[index + 1].levels[0].level if index + 1 < len(bands) else None
    if below is not None and above is not None:
        return f"between the measured levels {below} and {above}, whose answers differ or are undecided"
    if above is not None:
        return f"below the lowest measured level, {above}"
    if below is not None:
        return f"above the highest measured level, {below}"
    return "no experiment measured a level in this range"


def _words(band: service_bands.Band) -> str:
    """The band's answer with the chosen arm's words, as the rationale cites them (a chosen
    cell is called faster, so it has a speedup)."""
    if band.chosen is None:
        return band.word
    calls = [
        f"#{chosen.cell.experiment} {chosen.cell.outcome} {chosen.cell.speedup:.2f}× at {level.level}"
        for level in band.levels
        if (chosen := level.chosen) is not None
    ]
    return f"run {band.chosen.cell.label} ({', '.join(calls)})"


def _proposal(profile: ServiceProfile, bands: list[service_bands.Band], cited: list[int], hours: int | None) -> dict:
    proposed = service_bands.proposal(bands)
    words = "; ".join(f"{_span(band)}: {_words(band)}" for band in bands)
    rationale = f"From the recommendation of service profile {profile.service} per concurrency band ({words})."
    if hours is not None:
        rationale += f" Speculation pays for {hours} of 24 hours of its daily curve."
    fields: dict = {"service": profile.service, "kind": proposed.kind, "metric": profile.metric, "experiments": cited}
    if proposed.chosen is not None:
        fields.update(arm=proposed.chosen.cell.arm, max_concurrency=proposed.max_concurrency)
    return {**fields, "rationale": rationale}


def _percent(mix: dict[str, float]) -> str:
    return ", ".join(f"{category} {share:.0%}" for category, share in sorted(mix.items()))


def _mix_warnings(profile: ServiceProfile, evidence: ProfileEvidence, cited: list[int]) -> list[str]:
    """Where an experiment's prompts are not the service's mix, so its words may not carry over."""
    stated = profile.category_mix
    warnings = []
    for pk in cited if stated else []:
        measured = evidence.mixes[pk]
        if not measured:
            warnings.append(f"#{pk}: the categories of its prompts are unknown (synthetic prompts, or an uploaded "
                            f"set without several categories); the service's mix is {_percent(stated)}.")  # fmt: skip
        elif service_bands.mix_difference(measured, stated) > service_bands.MIX_DIFFERS:
            warnings.append(f"#{pk} measured {_percent(measured)}; the service's mix is {_percent(stated)}.")
    return warnings


def page_context(*, profile: ServiceProfile, evidence: ProfileEvidence) -> dict:
    low, high = profile.concurrency_range
    load = service_bands.Load(low, high, profile.daily_concurrency, profile.slos, profile.category_mix)
    bands = service_bands.bands(evidence.cells, load, evidence.baselines)
    cited = sorted({e.cell.experiment for band in bands for level in band.levels for e in level.evidence})
    hours = service_bands.paying_hours(bands)
    proposal = _proposal(profile, bands, cited, hours)
    return {
        "bands": [{"band": band, "span": _span(band), "edges": _edges(i, bands)} for i, band in enumerate(bands)],
        "paying_hours": hours,
        "cited": [evidence.experiments[pk] for pk in cited],
        "other_metric": evidence.other_metric,
        "mix_warnings": _mix_warnings(profile, evidence, cited),
        "propose_url": reverse("experiments:decision_new") + "?" + urlencode(proposal, doseq=True),
    }
