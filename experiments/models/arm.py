"""An experiment's arms: the baseline and each speculative decoding method it compares, with
the --speculative-config each one's server gets."""

from typing import Self

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning.limits import MAX_SPECULATIVE_TOKENS
from experiments.models.definition import Experiment
from experiments.rules import server_settings


class ArmQuerySet(models.QuerySet):
    def compared_or_baseline(self) -> Self:
        """The arms whose measurements the comparison shows: every arm but a calibration arm,
        which serves another model than the target and has no speedup."""
        return self.filter(is_calibration=False)


# The per-arm server settings' keys of --speculative-config (draft tensor parallel size).
_ARM_FIELDS = tuple(setting.engine_field for setting in server_settings.ARM_SETTINGS)


class Arm(models.Model):
    class Method(models.TextChoices):
        BASELINE = "baseline", "Baseline (no speculation)"
        NGRAM = "ngram", "n-gram lookup"
        NGRAM_GPU = "ngram_gpu", "n-gram lookup on the GPU"
        DRAFT_MODEL = "draft_model", "Draft model"
        EAGLE = "eagle", "EAGLE"
        EAGLE3 = "eagle3", "EAGLE-3"
        MTP = "mtp", "MTP"
        SUFFIX = "suffix", "Suffix decoding"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="arms")
    position = models.PositiveSmallIntegerField()
    label = models.CharField(max_length=100)
    method = models.CharField(max_length=16, choices=Method.choices)
    num_speculative_tokens = models.PositiveSmallIntegerField(null=True, blank=True)
    # Method-specific settings: prompt_lookup_min/max (n-gram), model (draft, EAGLE heads).
    params = models.JSONField(default=dict, blank=True)
    # A second, identical baseline (A/A): compared with the baseline like any arm, its
    # "speedup" is the noise floor of the experiment.
    is_replicate = models.BooleanField(default=False)
    # Mean acceptance lengths at which the arm runs again with vLLM's synthetic acceptance
    # (experiments/analysis/acceptance_sweep.py): those runs are not the arm's measurements.
    synthetic_sweep = ArrayField(
        models.FloatField(),
        default=list,
        blank=True,
        help_text="Synthetic mean acceptance lengths to run the arm at besides its real runs; empty: no sweep.",
    )
    # A calibration arm serves a draft model (params["model"]) alone with plain decoding: it
    # measures what a draft step costs, and is never compared with the baseline.
    is_calibration = models.BooleanField(default=False)
    # A confirmation arm runs the batch-size schedule of k derived from another arm's verdicts
    # (experiments/measurement/deploy/batch_schedule.py): added by the break-even search once that arm's
    # break-even is found, so that the recommended --speculative-config is measured, not only derived.
    confirms = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="confirmations",
        help_text="The arm whose derived schedule this arm runs to confirm it.",
    )  # fmt: skip

    objects = ArmQuerySet.as_manager()

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "position"], name="arm_position_unique"),
            models.UniqueConstraint(fields=["experiment", "label"], name="arm_label_unique"),
            models.UniqueConstraint(
                fields=["experiment"],
                condition=Q(method="baseline", is_replicate=False, is_calibration=False),
                name="arm_one_baseline_per_experiment",
            ),
            models.UniqueConstraint(
                fields=["experiment"], condition=Q(is_replicate=True), name="arm_one_replicate_per_experiment"
            ),
            models.CheckConstraint(
                condition=Q(is_replicate=False) | Q(method="baseline"), name="arm_replicate_is_a_baseline"
            ),
            models.CheckConstraint(
                condition=Q(is_calibration=False) | Q(method="baseline", is_replicate=False),
                name="arm_calibration_is_plain_decoding",
            ),
            models.CheckConstraint(
                condition=Q(method="baseline", num_speculative_tokens__isnull=True)
                | (
                    ~Q(method="baseline")
                    & Q(num_speculative_tokens__gte=1, num_speculative_tokens__lte=MAX_SPECULATIVE_TOKENS)
                ),
                name="arm_k_matches_method",
            ),
        ]

    def __str__(self):
        return self.label

    @property
    def is_baseline(self) -> bool:
        """The reference every other arm (the replicate included) is compared with."""
        return self.method == self.Method.BASELINE and not self.is_replicate and not self.is_calibration

    @property
    def is_speculative(self) -> bool:
        return self.method != self.Method.BASELINE

    # The keys of vLLM's --speculative-config that specdash sets for each method, beside method
    # and num_speculative_tokens: the experiment form's fields (experiments/definition/forms/), and all an
    # imported config may carry (experiments/imports/services.py). tests/test_vllm_config_keys.py checks
    # them against the installed vLLM's SpeculativeConfig.
    PARAM_KEYS = {
        Method.NGRAM: ("prompt_lookup_min", "prompt_lookup_max"),
        Method.NGRAM_GPU: ("prompt_lookup_min", "prompt_lookup_max"),
        Method.DRAFT_MODEL: ("model",),
        Method.EAGLE: ("model",),
        Method.EAGLE3: ("model",),
        Method.MTP: (),
        Method.SUFFIX: (),
    }

    # Prompt lookup (n-gram) proposers, with the same settings: vLLM 0.32 turns async scheduling
    # off for ngram and keeps it for ngram_gpu, as for plain decoding (config/vllm.py).
    NGRAM_METHODS = frozenset({Method.NGRAM, Method.NGRAM_GPU})

    # Keys a method's config may carry beside PARAM_KEYS, vLLM's default applying when absent
    # (experiments/rules/server_settings.py's per-arm settings, checked by the same test).
    # vLLM 0.32's batch-size schedule (experiments/measurement/deploy/batch_schedule.py) for every method.
    OPTIONAL_PARAM_KEYS = {
        method: (*(_ARM_FIELDS if method in server_settings.DRAFT_TP_METHODS else ()), batch_schedule.KEY)
        for method in PARAM_KEYS
    }

    def speculative_config(self) -> dict | None:
        """The JSON vLLM takes as --speculative-config, or None for plain decoding."""
        if not self.is_speculative:
            return None
        config = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        config.update(self.params)
        return config

    def synthetic_config(self, acceptance_length: float) -> dict:
        """The arm's --speculative-config with real rejection replaced by vLLM's synthetic
        acceptance: the proposer and the verifier still run, but each draft position is
        accepted at the rate that gives this mean acceptance length (vLLM 0.32,
        SpeculativeConfig.synthetic_acceptance_length, in [1, k + 1])."""
        config = self.speculative_config()
        # The experiment form and the API refuse a synthetic sweep on an arm without k.
        assert config is not None, "only a speculative arm runs a synthetic sweep"
        return config | {
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": acceptance_length,
        }
