"""The page's protocol reads (experiments/results/selectors.py): the warnings before and after the
analysis, one server command per arm."""

import pytest

from experiments.models import Experiment, Run
from experiments.results import selectors
from tests.factories import (
    ArmFactory,
    EnvironmentSnapshotFactory,
    RunFactory,
    seed_finished_experiment,
)
from tests.results.helpers import two_arms

pytestmark = pytest.mark.django_db


def test_warnings_come_from_the_settings_until_the_analysis_holds_them_all():
    experiment = seed_finished_experiment(
        workload_kind=Experiment.WorkloadKind.SYNTHETIC, prompt_set="", synthetic_input_len=64, temperature=0.5,
        ignore_eos=True,
    )  # fmt: skip
    before = selectors.experiment_warnings(experiment=experiment)
    after = selectors.experiment_warnings(experiment=experiment, analysis=experiment.analysis)

    assert len(before) == 3
    assert after == experiment.analysis.warnings
    assert after[:3] == before
    assert sum("ynthetic" in w for w in after) == 1
    assert sum("ignore_eos" in w for w in after) == 1
    assert "temperature 0.5" in before[-1]


def test_protocol_shows_one_server_command_per_arm_whatever_port_each_server_took():
    experiment, baseline, arm = two_arms()
    replicate = ArmFactory(experiment=experiment, baseline=True, position=2, label="replicate", is_replicate=True)
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--port"]
    for block, port in ((1, "8100"), (2, "8231")):
        for each in (baseline, arm, replicate):
            run = RunFactory(arm=each, repetition=block, status=Run.Status.SUCCEEDED)
            EnvironmentSnapshotFactory(run=run, server_command=[*command, port, "--seed", "0"])

    rows = {row.arm.label: row for row in selectors.experiment_arms(experiment=experiment)}

    assert rows["baseline"].server_commands == [
        "python -m vllm.entrypoints.openai.api_server --model /m --port '<port>' --seed 0"
    ]
    assert rows["replicate"].speculative_config_json == ""  # plain decoding, like the baseline
    assert rows["n-gram k=4"].speculative_config_json.startswith('{"method": "ngram"')
