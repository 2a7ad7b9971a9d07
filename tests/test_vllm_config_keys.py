"""The speculative-config keys specdash writes (Arm.PARAM_KEYS, the synthetic sweep's two) are
keys the installed vLLM's SpeculativeConfig has, its methods are methods vLLM knows, and the
profiler-config keys are ProfilerConfig's: a vLLM upgrade that renames one fails here, not in a
server log. Read in vLLM's own environment."""

import json
import subprocess

from django.conf import settings

from experiments.models import Arm
from workers.server.vllm_server import profiler_args

# Prints the installed SpeculativeConfig's field names and the values its `method` accepts.
INTROSPECT = """
import dataclasses, json, typing
from vllm.config import ProfilerConfig, SpeculativeConfig
method = typing.get_type_hints(SpeculativeConfig)["method"]
literal = next(arg for arg in typing.get_args(method) if typing.get_origin(arg) is typing.Literal)
print(json.dumps({"fields": [f.name for f in dataclasses.fields(SpeculativeConfig)],
                  "methods": list(typing.get_args(literal)),
                  "profiler": [f.name for f in dataclasses.fields(ProfilerConfig)]}))
"""


def _installed() -> dict:
    done = subprocess.run(
        [settings.SPECDASH_VLLM_PYTHON, "-c", INTROSPECT], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_key_specdash_sets_is_one_vllm_has(tmp_path):
    installed = _installed()
    assert set(Arm.PARAM_KEYS) <= set(installed["methods"]), set(Arm.PARAM_KEYS) - set(installed["methods"])
    written = {"method", "num_speculative_tokens", *(key for keys in Arm.PARAM_KEYS.values() for key in keys)}
    arm = Arm(method=Arm.Method.NGRAM, num_speculative_tokens=2, params={"prompt_lookup_min": 1})
    written |= set(arm.synthetic_config(1.5))
    assert written <= set(installed["fields"]), written - set(installed["fields"])
    assert "trust_remote_code" not in written
    _, profiler_config = profiler_args(tmp_path)
    assert set(json.loads(profiler_config)) <= set(installed["profiler"])
