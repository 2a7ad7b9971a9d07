"""What vLLM decided otherwise for an arm than for the baseline reaches the verdict's warnings, not
only the protocol card (experiments/analysis/engine_decisions.py): a CUDA-graph mode the model
runner downgraded for speculation, a KV cache that holds fewer tokens; and a worker whose vLLM
ran without FlashInfer's kernels. The lines are vLLM 0.32's (tests/workers/server/test_engine_report.py)."""

import pytest

from experiments.analysis import engine_decisions
from experiments.analysis.services import experiment_analyse
from experiments.models import Arm, EnvironmentSnapshot, Experiment
from tests.analysis.test_analysis import BLOCKS, _cell
from tests.factories import ArmFactory, ExperimentFactory

pytestmark = pytest.mark.django_db

DOWNGRADE = (
    "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FLASH_ATTN (support: "
    "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE"
)
DISABLED = (
    "FlashInfer kernels are disabled: flashinfer-cubin is not installed and nvcc (CUDA_HOME, CUDA_PATH, PATH or "
    "/usr/local/cuda) or ninja (PATH) is missing. Set CUDA_HOME to a CUDA toolkit and put ninja on PATH, or run "
    "`vllm download-kernels`."
)
BASELINE = {"model_runner": "V2", "cuda_graphs": "FULL_AND_PIECEWISE", "kv_cache_tokens": 1_000_000}
DRAFT = {
    "model_runner": "V2", "cuda_graphs": "PIECEWISE", "kv_cache_tokens": 800_000,
    "engine_log_lines": {"cuda_graphs": DOWNGRADE, "flashinfer": DISABLED},
}  # fmt: skip


@pytest.fixture
def experiment():
    experiment = ExperimentFactory(concurrency_levels=[1], repetitions=BLOCKS, status=Experiment.Status.FINISHED)
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    arm = ArmFactory(experiment=experiment, position=1, label="draft k=4", method=Arm.Method.DRAFT_MODEL)
    for block in range(1, BLOCKS + 1):
        _cell(baseline, block, tpot=20.0, throughput=100.0)
        _cell(arm, block, tpot=12.0, throughput=160.0, drafts=10, accepted=10, per_pos=[5, 3, 2, 0])
    EnvironmentSnapshot.objects.filter(run__arm=baseline).update(**BASELINE)
    EnvironmentSnapshot.objects.filter(run__arm=arm).update(**DRAFT)
    return experiment


def test_the_arms_engine_differences_are_among_the_verdicts_warnings(experiment):
    warnings = experiment_analyse(experiment=experiment).warnings

    [graphs] = [w for w in warnings if "CUDA-graph difference" in w]
    assert graphs.startswith("draft k=4 ran with CUDA graphs on (PIECEWISE) while the baseline ran with CUDA graphs on")
    [kv] = [w for w in warnings if "KV-cache tokens" in w]
    assert "800,000 KV-cache tokens against the baseline's 1,000,000 (-20%)" in kv
    [flashinfer] = [w for w in warnings if "FlashInfer" in w]
    assert "(disabled; servers of draft k=4: “FlashInfer kernels are disabled" in flashinfer


def test_the_protocol_cards_decision_names_flashinfer_from_its_line(experiment):
    decisions = engine_decisions.arm_decisions(experiment=experiment)
    states = {d.flashinfer for arm_decisions in decisions.values() for d in arm_decisions}

    assert states == {"", "disabled"}
    assert engine_decisions.flashinfer_state({"flashinfer": "FlashInfer's precompiled kernels are missing …"}) == (
        "kernels missing"
    )
