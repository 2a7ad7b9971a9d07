"""The speculative-config keys specdash writes (Arm.PARAM_KEYS, the synthetic sweep's two) are
keys the installed vLLM's SpeculativeConfig has, its methods are methods vLLM knows, and the
profiler-config keys are ProfilerConfig's, and every server setting
(experiments/rules/server_settings.py) is an EngineArgs field whose flag vLLM's own serve parser
takes, or a SpeculativeConfig field: a vLLM upgrade that renames one fails here, not in a
server log. Read in vLLM's own environment."""

import json
import subprocess

import pytest
from django.conf import settings

from experiments.definition.forms.arms import SPECULATIVE_METHODS
from experiments.measurement.deploy import batch_schedule
from experiments.models import Arm
from experiments.rules import server_settings
from workers.server import method_support
from workers.server.command import build_server_args, profiler_args

# vLLM itself, imported in the vLLM environment.
pytestmark = pytest.mark.vllm

# Prints the installed SpeculativeConfig's field names, the values its `method` accepts and the
# source of its suffix decoding check (which names the arctic-inference version to install).
INTROSPECT = """
import dataclasses, inspect, json, typing
from vllm.config import ProfilerConfig, SpeculativeConfig
def values(hint):  # the strings of a Literal, within a Union or Optional
    if isinstance(hint, str):
        return [hint]
    return [value for arg in typing.get_args(hint) for value in values(arg)]
print(json.dumps({"fields": [f.name for f in dataclasses.fields(SpeculativeConfig)],
                  "methods": values(typing.get_type_hints(SpeculativeConfig)["method"]),
                  "profiler": [f.name for f in dataclasses.fields(ProfilerConfig)],
                  "suffix_check": inspect.getsource(SpeculativeConfig._validate_suffix_decoding)}))
"""


@pytest.fixture(scope="module")
def installed() -> dict:
    """What INTROSPECT prints, read once: each start of vLLM's interpreter imports torch."""
    done = subprocess.run(
        [settings.SPECDASH_VLLM_PYTHON, "-c", INTROSPECT], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_key_specdash_sets_is_one_vllm_has(installed, tmp_path):
    assert set(Arm.PARAM_KEYS) <= set(installed["methods"]), set(Arm.PARAM_KEYS) - set(installed["methods"])
    offered = {value for value, _ in SPECULATIVE_METHODS}
    assert offered <= set(installed["methods"]), offered - set(installed["methods"])
    assert Arm.Method.NGRAM_GPU in installed["methods"]
    written = {"method", "num_speculative_tokens", *(key for keys in Arm.PARAM_KEYS.values() for key in keys)}
    arm = Arm(method=Arm.Method.NGRAM, num_speculative_tokens=2, params={"prompt_lookup_min": 1})
    written |= set(arm.synthetic_config(1.5))
    assert written <= set(installed["fields"]), written - set(installed["fields"])
    assert "trust_remote_code" not in written
    assert batch_schedule.KEY in installed["fields"]
    _, profiler_config = profiler_args(tmp_path)
    assert set(json.loads(profiler_config)) <= set(installed["profiler"])


# Reads a server command on stdin and prints what the installed vLLM makes of it: its serve
# parser's values for the EngineArgs fields asked for, the flags and choices of those fields'
# options, EngineArgs' and SpeculativeConfig's fields, and the quantization methods it knows.
PARSE = """
import dataclasses, json, sys
from vllm.config import SpeculativeConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
from vllm.utils.argparse_utils import FlexibleArgumentParser
asked = json.load(sys.stdin)
parser = make_arg_parser(FlexibleArgumentParser())
parsed = vars(parser.parse_args(asked["args"]))
actions = {a.dest: {"flags": a.option_strings, "choices": list(a.choices or [])} for a in parser._actions}
print(json.dumps({
    "parsed": {name: parsed[name] for name in asked["fields"]},
    "options": {name: actions[name] for name in asked["fields"]},
    "engine_fields": [f.name for f in dataclasses.fields(EngineArgs)],
    "speculative_fields": [f.name for f in dataclasses.fields(SpeculativeConfig)],
    "quantization": QUANTIZATION_METHODS,
}))
"""

# A value of each setting that the form accepts, every choice setting at its last choice.
SAMPLES = {"gpu_memory_utilization": 0.5, "max_num_seqs": 3, "max_num_batched_tokens": 96}


def test_every_server_setting_is_a_flag_and_field_of_the_installed_vllm():
    """Each setting's EngineArgs field exists, vLLM's serve parser takes its flag for that field
    and reads the value build_server_args writes, its choices are among vLLM's, and the arms'
    settings are SpeculativeConfig fields."""
    values = {
        s.name: SAMPLES.get(s.name, s.choices[-1] if s.choices else None) for s in server_settings.SERVER_SETTINGS
    }
    args = build_server_args(
        python="python", model="/models/target", port=8000, dtype="auto", max_model_len=512, seed=0,
        speculative_config={"method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 2,
                            "draft_tensor_parallel_size": 1},
        enforce_eager=True, engine_settings=values,
    )  # fmt: skip
    fields = [s.engine_field for s in server_settings.SERVER_SETTINGS]
    asked = json.dumps({"args": args[3:], "fields": [*fields, "speculative_config"]})
    done = subprocess.run(
        [settings.SPECDASH_VLLM_PYTHON, "-c", PARSE], input=asked, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    installed = json.loads(done.stdout.strip().splitlines()[-1])

    for setting in server_settings.SERVER_SETTINGS:
        assert setting.engine_field in installed["engine_fields"], setting.name
        assert setting.flag in installed["options"][setting.engine_field]["flags"], setting.name
        assert installed["parsed"][setting.engine_field] == values[setting.name], setting.name
    assert set(server_settings.KV_CACHE_DTYPES) <= set(installed["options"]["kv_cache_dtype"]["choices"])
    assert set(server_settings.QUANTIZATION_METHODS) <= set(installed["quantization"])
    arm_keys = {s.engine_field for s in server_settings.ARM_SETTINGS}
    assert arm_keys <= set(installed["speculative_fields"])
    assert installed["parsed"]["speculative_config"]["draft_tensor_parallel_size"] == 1


def test_the_arctic_inference_version_specdash_installs_is_the_one_vllm_asks_for(installed):
    """vLLM's refusal of a suffix config without arctic-inference names the version to install;
    the worker's refusal and requirements/vllm-gpu.txt name the same."""
    assert f"pip install {method_support.ARCTIC_INFERENCE}" in installed["suffix_check"]


# Reads schedules on stdin and prints, for each, the dense batch size -> k lookup the installed
# vLLM's scheduler would run (vllm/v1/spec_decode/dynamic/utils.py), or its refusal.
SCHEDULES = """
import json, sys
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup
answers = []
for asked in json.load(sys.stdin):
    try:
        answers.append({"lookup": build_dynamic_sd_schedule_lookup(
            asked["schedule"], vllm_max_batch_size=asked["max"], vllm_num_speculative_tokens=asked["k"])})
    except (ValueError, TypeError) as error:
        answers.append({"refused": str(error)})
print(json.dumps(answers))
"""


def vllm_lookups(asked: list[dict]) -> list[dict]:
    """The installed vLLM's answer for each {"schedule", "max", "k"}."""
    done = subprocess.run(
        [settings.SPECDASH_VLLM_PYTHON, "-c", SCHEDULES], input=json.dumps(asked), capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def expected_lookup(schedule: list, *, max_batch: int) -> list[int]:
    """Batch size -> k as specdash's rule says the schedule reads: each band's k, the last band's
    beyond it (index 0 unused, as in vLLM's lookup)."""
    bands = batch_schedule.normalised(schedule)
    return [0] + [next((k for _, end, k in bands if size <= end), bands[-1][2]) for size in range(1, max_batch + 1)]


ARM_K = 4
ACCEPTED = [
    [[1, 8, 4], [9, 64, 2]],
    [[9, 64, 0], [1, 8, 4]],
    [[1, 1, 0], [2, 3, 4], [4, 4, 1]],
    [[1, 1000, 3]],
    [[1, 2, 4]],
]
# Refused by vLLM's own validator, for the reasons specdash gives.
REFUSED_BY_VLLM = [
    [],
    [[1, 8]],
    [[0, 8, 4]],
    [[1, 8, 4], [12, 9, 2]],
    [[1, 8, -1]],
    [[2, 8, 4]],
    [[1, 8, 4], [8, 16, 2]],
    [[1, 8, 4], [4, 6, 2]],
]
# Taken by vLLM but not as written, so specdash refuses them: a k above the arm's is lowered
# to it, a gap gets the k of the band before.
CHANGED_BY_VLLM = {
    "k above the arm's": ([[1, 8, 5], [9, 16, 2]], [0, *[ARM_K] * 8, *[2] * 8]),
    "a gap": ([[1, 4, 3], [9, 16, 1]], [0, *[3] * 8, *[1] * 8]),
}


def test_specdashs_schedule_rule_agrees_with_the_installed_vllms_validator():
    """Every schedule specdash accepts runs in vLLM as specdash reads it; every one it refuses
    vLLM refuses too, or would run otherwise than written."""
    changed = list(CHANGED_BY_VLLM.values())
    asked = [{"schedule": s, "max": 16, "k": ARM_K} for s in [*ACCEPTED, *REFUSED_BY_VLLM, *(s for s, _ in changed)]]
    answers = vllm_lookups(asked)
    accepted, refused, rest = answers[: len(ACCEPTED)], answers[len(ACCEPTED) : -len(changed)], answers[-len(changed) :]

    for schedule, answer in zip(ACCEPTED, accepted, strict=True):
        assert batch_schedule.problem(schedule, k=ARM_K) is None, schedule
        assert answer == {"lookup": expected_lookup(schedule, max_batch=16)}, schedule
    for schedule, answer in zip(REFUSED_BY_VLLM, refused, strict=True):
        assert batch_schedule.problem(schedule, k=ARM_K) is not None, schedule
        assert "refused" in answer, (schedule, answer)
    for (schedule, lookup), answer in zip(changed, rest, strict=True):
        assert batch_schedule.problem(schedule, k=ARM_K) is not None, schedule
        assert answer == {"lookup": lookup}, schedule
