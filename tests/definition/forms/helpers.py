"""The experiment form and its arms bound as the create view binds them."""

from experiments.definition.forms.arms import ARM_FORMSET_PREFIX, ArmFormSet
from experiments.definition.forms.experiment import ExperimentForm
from tests.factories import UserFactory


def bind(data):
    """The two forms as the create view binds them: the experiment form knows the posted arms."""
    arms = ArmFormSet(data, prefix=ARM_FORMSET_PREFIX)
    form = ExperimentForm(
        data,
        user=UserFactory(username="alice"),
        speculative_arms=arms.total_form_count(),
        sweep_lengths=arms.posted_sweep_lengths(),
        draft_arms=arms.posted_draft_arms(),
        per_run_arms=arms.posted_per_run_arms(),
    )
    return form, arms
