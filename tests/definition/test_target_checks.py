"""MTP on a target without MTP layers, and a draft model at another tensor parallel size than its
target's, are refused at every door with the reason, before any server starts: the experiment
form, the API's spec (through the same forms), an import, a deploy decision's arm, and the worker
itself (experiments/rules/speculation_targets.py)."""

import json

import pytest

from experiments.api.submission import SpecInvalid, submission_from_spec
from experiments.definition.forms.experiment import protocol_is_valid
from experiments.definition.speculative_configs import config_problem
from experiments.imports.bench_files import BenchFileRefused
from experiments.imports.services import arms_from_files
from experiments.models import Arm
from tests.definition.forms.helpers import bind
from tests.factories import ArmFactory, ExperimentFactory, UserFactory, form_data
from workers.server import launch

pytestmark = pytest.mark.django_db

MTP_ARM = {"method": "mtp", "num_speculative_tokens": "1"}


@pytest.fixture
def models(settings, tmp_path):
    """A Llama (no MTP layers) and a DeepSeek-V3 (one) inside the models folder."""
    settings.SPECDASH_MODELS_DIR = tmp_path
    for name, config in (
        ("llama", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}),
        ("deepseek", {"model_type": "deepseek_v3", "num_nextn_predict_layers": 1}),
        ("draft", {"model_type": "llama"}),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_the_form_refuses_mtp_on_a_target_without_mtp_layers_on_the_arm(models):
    form, arms = bind(form_data(target_model=str(models / "llama"), arms=[MTP_ARM]))

    assert not protocol_is_valid(form, arms)
    [message] = arms.forms[0].errors["method"]
    assert message.startswith(f"The target {models / 'llama'} cannot run MTP: its config.json names no MTP layers")
    on_deepseek, deepseek_arms = bind(form_data(target_model=str(models / "deepseek"), arms=[MTP_ARM]))
    assert protocol_is_valid(on_deepseek, deepseek_arms), deepseek_arms.errors


def test_the_form_refuses_a_draft_model_at_tp_1_under_a_larger_target_and_lets_an_eagle_head(models):
    draft = {"method": "draft_model", "num_speculative_tokens": "4", "model": str(models / "draft")}
    form, arms = bind(form_data(tensor_parallel_size="2", arms=[{**draft, "draft_tensor_parallel_size": "1"}]))

    assert not protocol_is_valid(form, arms)
    assert "for a draft model: vLLM 0.32's V1 proposer refuses" in arms.forms[0].errors["draft_tensor_parallel_size"][0]
    eagle = {**draft, "method": "eagle", "draft_tensor_parallel_size": "1"}
    assert protocol_is_valid(*bind(form_data(tensor_parallel_size="2", arms=[eagle])))


def test_the_apis_spec_is_refused_with_the_same_reason(models):
    spec = {"name": "mtp on llama", "target_model": str(models / "llama"), "worker_queue": "cpu",
            "prompt_set": "chat", "num_prompts": 20, "max_tokens": 64, "concurrency_levels": [1, 4],
            "arms": [{"method": "mtp", "num_speculative_tokens": 1}]}  # fmt: skip

    with pytest.raises(SpecInvalid) as refused:
        submission_from_spec(spec, user=UserFactory())
    assert any("cannot run MTP" in line for line in refused.value.messages)


def test_an_import_of_an_mtp_arm_on_a_target_without_mtp_layers_is_refused(models, monkeypatch):
    file = type("File", (), {"model_id": str(models / "llama")})()
    monkeypatch.setattr(
        "experiments.imports.methods.arm_label", lambda file, baseline: "mtp" if file.is_arm else baseline
    )
    baseline, arm = file, type("File", (), {"model_id": str(models / "llama"), "is_arm": True})()
    baseline.is_arm = False
    monkeypatch.setattr(
        "experiments.imports.methods.arm_method",
        lambda label, group: (Arm.Method.MTP, 1, {}) if label == "mtp" else (Arm.Method.BASELINE, None, {}),
    )

    with pytest.raises(BenchFileRefused, match=r"Arm “mtp”: the target .* cannot run MTP"):
        arms_from_files([baseline, arm])


def test_a_deploy_decisions_config_is_checked_beside_its_experiments_target(models):
    config = {"method": "draft_model", "num_speculative_tokens": 4, "model": str(models / "draft"),
              "draft_tensor_parallel_size": 1}  # fmt: skip

    assert config_problem(config) is None  # the target unknown: the draft's own rules only
    assert "for a draft model" in str(
        config_problem(config, target_model=str(models / "llama"), tensor_parallel_size=2)
    )
    assert "cannot run MTP" in str(
        config_problem({"method": "mtp", "num_speculative_tokens": 1}, target_model=str(models / "llama"))
    )


def test_the_worker_checks_the_target_on_its_own_disk_before_any_server(models):
    experiment = ExperimentFactory(target_model=str(models / "llama"), tensor_parallel_size=2)
    mtp = ArmFactory(experiment=experiment, position=1, label="mtp k=1", method=Arm.Method.MTP, params={})
    draft = ArmFactory(
        experiment=experiment, position=2, label="draft tp1", method=Arm.Method.DRAFT_MODEL,
        params={"model": str(models / "draft"), "draft_tensor_parallel_size": 1},
    )  # fmt: skip

    with pytest.raises(launch.TargetRefused, match=r"mtp k=1: the target .* cannot run MTP"):
        launch.target_check(mtp)
    with pytest.raises(launch.TargetRefused, match="draft tp1: its draft tensor parallel size must be the target's"):
        launch.target_check(draft)
    experiment.target_model = str(models / "deepseek")
    launch.target_check(mtp)
