"""What vLLM decided, read from server logs in vLLM 0.32's words. The messages are copied from
the installed vLLM's source (file and line in site-packages/vllm beside each); the prefix is
vLLM's log format (vllm/logger.py:28, "(%(vllm_process_name)s pid=%(process)d) %(levelname)s
%(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s", the line number that of the logger call). The
CPU lines match what this host's servers logged on 2 December 2026 (the integration test's)."""

import ast
import re
from pathlib import Path

from django.conf import settings

from workers.server.engine_report import EngineReport, parse_engine_report, read_engine_report

API = "(APIServer pid=4101) "
ENGINE = "(EngineCore pid=4188) "

# The V1 shape: an n-gram arm on a CPU host such as this one.
CPU_NGRAM_LOG = [
    API + "INFO 12-02 16:40:00 [utils.py:301] non-default args: {'model': '/models/target', 'enforce_eager': True}",
    # config/vllm.py:726
    API + "WARNING 12-02 16:40:01 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model runner instead.",
    # config/vllm.py:1606-1609
    API + "WARNING 12-02 16:40:01 [vllm.py:1605] Async scheduling not supported with ngram-based speculative "
    "decoding and will be disabled.",
    # config/vllm.py:1703-1708
    API + "WARNING 12-02 16:40:01 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT "
    "kernel warmup. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none and "
    "--kernel_config.enable_jit_warmup=False",
    # config/vllm.py:1929
    API + "INFO 12-02 16:40:01 [vllm.py:1929] Cudagraph is disabled under eager mode",
    # v1/engine/core.py:134, the config as config/vllm.py:2703 (__str__) and config/compilation.py:824 print it
    ENGINE + "INFO 12-02 16:40:06 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/models/target', speculative_config=SpeculativeConfig(method='ngram', num_spec_tokens=3), "
    "enforce_eager=True, compilation_config={'mode': <CompilationMode.NONE: 0>, 'cudagraph_mode': "
    "<CUDAGraphMode.NONE: 0>, 'cudagraph_num_of_warmups': 0}, kernel_config=KernelConfig()",
    # v1/core/kv_cache_utils.py:2328-2334
    ENGINE + "INFO 12-02 16:40:12 [kv_cache_utils.py:2327] CPU KV cache size: 87,296 tokens, Maximum concurrency "
    "for 512 tokens per request: 170.50x",
    API + "INFO 12-02 16:40:20 [launcher.py:46] Route: /metrics, Methods: GET",
]

# The V2 shape: a plain baseline on a GPU host.
GPU_V2_LOG = [
    ENGINE + "INFO 12-02 16:40:06 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/models/llama', speculative_config=None, enforce_eager=False, compilation_config={'mode': "
    "<CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}, "
    "kernel_config=KernelConfig()",
    # v1/worker/gpu_worker.py:518
    ENGINE + "INFO 12-02 16:40:07 [gpu_worker.py:518] Using V2 Model Runner",
    # v1/core/kv_cache_utils.py:2328-2334
    ENGINE + "INFO 12-02 16:41:02 [kv_cache_utils.py:2327] GPU KV cache size: 1,234,560 tokens, Maximum "
    "concurrency for 4,096 tokens per request: 301.41x",
    # v1/worker/gpu/model_runner.py:1127-1131
    ENGINE + "INFO 12-02 16:41:20 [model_runner.py:1127] Graph capturing finished in 14 secs, took 0.52 GiB",
]

# The V1 shape on a GPU host: a suffix arm, which V2 does not run.
GPU_SUFFIX_LOG = [
    # config/vllm.py:731-735, the feature as config/vllm.py:2934 names it
    API + "WARNING 12-02 16:40:01 [vllm.py:730] Model Runner V2 does not yet support speculative method 'suffix'; "
    "using the V1 model runner instead.",
    # config/vllm.py:1606-1609
    API + "WARNING 12-02 16:40:01 [vllm.py:1605] Async scheduling not supported with suffix-based speculative "
    "decoding and will be disabled.",
    # v1/core/kv_cache_utils.py:2328-2334
    ENGINE + "INFO 12-02 16:41:02 [kv_cache_utils.py:2327] GPU KV cache size: 1,100,000 tokens, Maximum "
    "concurrency for 4,096 tokens per request: 268.55x",
    # v1/worker/gpu_model_runner.py:6581-6585
    ENGINE + "INFO 12-02 16:41:20 [gpu_model_runner.py:6581] Graph capturing finished in 9 secs, took 0.48 GiB",
]


def test_the_v1_runner_on_cpu_eager_without_async_scheduling():
    report = parse_engine_report(CPU_NGRAM_LOG)
    assert (report.model_runner, report.async_scheduling, report.cuda_graphs, report.kv_cache_tokens) == (
        "V1",
        False,
        "off",
        87_296,
    )
    assert report.evidence["model_runner"] == "Model Runner V2 requires Triton; using the V1 model runner instead."
    assert report.evidence["async_scheduling"].startswith("Async scheduling not supported with ngram-based")
    assert report.evidence["kv_cache_tokens"].startswith("CPU KV cache size: 87,296 tokens")


def test_the_cpu_platform_turns_async_scheduling_off_without_a_line():
    """vllm/platforms/cpu.py:330-331; the baseline's log has no async line, its KV line names the CPU."""
    baseline = [line for line in CPU_NGRAM_LOG if "Async scheduling" not in line]
    report = parse_engine_report(baseline)
    assert report.async_scheduling is False
    assert report.evidence["async_scheduling"].startswith("vLLM's CPU platform turns it off without a line")
    assert report.evidence["async_scheduling"].endswith(
        "CPU KV cache size: 87,296 tokens, Maximum concurrency for 512 tokens per request: 170.50x"
    )


def test_the_v2_runner_on_gpu_with_its_cuda_graph_mode():
    report = parse_engine_report(GPU_V2_LOG)
    assert (report.model_runner, report.cuda_graphs, report.kv_cache_tokens) == ("V2", "FULL_AND_PIECEWISE", 1_234_560)
    # vLLM says nothing when it turns async scheduling on: unknown, not guessed.
    assert report.async_scheduling is None
    assert "async_scheduling" not in report.evidence
    assert report.evidence["cuda_graphs"] == "Graph capturing finished in 14 secs, took 0.52 GiB"


def test_a_suffix_arm_falls_back_to_v1_on_gpu_without_async_scheduling():
    report = parse_engine_report(GPU_SUFFIX_LOG)
    assert (report.model_runner, report.async_scheduling, report.cuda_graphs) == ("V1", False, "on")
    assert "speculative method 'suffix'" in report.evidence["model_runner"]


def test_a_skipped_capture_is_off_whatever_the_config_asked():
    # v1/worker/gpu_model_runner.py:6484-6487
    skipped = (
        ENGINE + "WARNING 12-02 16:41:20 [gpu_model_runner.py:6484] Skipping CUDA graph capture. To turn on CUDA "
        "graph capture, ensure `cudagraph_mode` was not manually set to `NONE`"
    )
    report = parse_engine_report([GPU_V2_LOG[0], skipped])
    assert report.cuda_graphs == "off"


def test_a_configured_mode_that_no_capture_confirmed_stays_unknown():
    assert parse_engine_report(GPU_V2_LOG[:1]).cuda_graphs is None


def test_lines_that_contradict_each_other_leave_the_field_unknown():
    report = parse_engine_report([*GPU_V2_LOG, GPU_SUFFIX_LOG[0]])
    assert report.model_runner is None
    assert "model_runner" not in report.evidence


def test_a_log_without_these_lines_reports_nothing():
    report = parse_engine_report(["(APIServer pid=1) INFO 12-02 16:40:00 [api_server.py:1] vLLM API server version"])
    assert report == EngineReport()
    assert report.record() == {
        "model_runner": "",
        "async_scheduling": None,
        "cuda_graphs": "",
        "kv_cache_tokens": None,
        "engine_log_lines": {},
    }


def test_the_log_is_read_from_its_head_only(tmp_path):
    log = tmp_path / "server.log"
    head = "\n".join(CPU_NGRAM_LOG[:3]) + "\n"
    log.write_text(head + "x" * 1000 + "\n" + CPU_NGRAM_LOG[6] + "\n")
    within = read_engine_report(log, limit_bytes=len(head.encode()))
    assert (within.model_runner, within.kv_cache_tokens) == ("V1", None)
    assert read_engine_report(log).kv_cache_tokens == 87_296


def test_a_missing_log_reports_nothing(tmp_path):
    assert read_engine_report(tmp_path / "none.log") == EngineReport()


# ---------------------------------------------------------------- lines made from vLLM's own format strings

VLLM_SOURCE = next((Path(settings.SPECDASH_VLLM_PYTHON).parent.parent / "lib").glob("python3*/site-packages/vllm"))


def vllm_messages(source: str, needle: str) -> list[str]:
    """The string literals of the installed vLLM's `source` file that hold `needle`, as the
    interpreter joins them (adjacent literals made one; an f-string's fields as "{}")."""
    tree = ast.parse((VLLM_SOURCE / source).read_text())
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            texts.append("".join(p.value if isinstance(p, ast.Constant) else "{}" for p in node.values))
    found = [text for text in texts if needle in text]
    assert found, f"vLLM's {source} no longer says {needle!r}: read its new words into engine_report.py"
    return found


def formatted(template: str, *values: str) -> str:
    """A %-style or f-string template (as vllm_messages gives it) filled with `values` in order."""
    parts = re.split(r"%[sd]|\{\}", template)
    assert len(parts) == len(values) + 1, (template, values)
    return "".join(part + value for part, value in zip(parts, [*values, ""], strict=True))


def logged(level: str, source: str, message: str) -> str:
    return f"{ENGINE}{level} 12-04 10:00:00 [{Path(source).name}:1] {message}"


SPEC_DECODE_DOWNGRADE = logged(
    "WARNING", "config/compilation.py",
    formatted(vllm_messages("config/compilation.py", "with spec-decode for attention backend")[0],
              "FULL_AND_PIECEWISE", "FLASH_ATTN", "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE")
    + next(m for m in vllm_messages("config/compilation.py", "; setting") if m == "; setting cudagraph_mode=PIECEWISE"),
)  # fmt: skip
DYNAMIC_SPEC_OVERRIDE = logged(
    "WARNING", "config/vllm.py",
    formatted(vllm_messages("config/vllm.py", "Overriding cudagraph_mode from %s to ")[0], "FULL_AND_PIECEWISE"),
)  # fmt: skip
STOCK_COMPILE_OVERRIDE = logged(
    "INFO",
    "config/vllm.py",
    formatted(vllm_messages("config/vllm.py", "Overriding cudagraph_mode %s to NONE")[0], "FULL"),
)
FLASHINFER_DISABLED_LINE = logged(
    "WARNING", "utils/flashinfer.py", vllm_messages("utils/flashinfer.py", "FlashInfer kernels are disabled")[0]
)
KERNELS_MISSING_LINE = logged(
    "WARNING", "utils/flashinfer.py",
    formatted(vllm_messages("utils/flashinfer.py", "precompiled kernels are missing")[0], "0.6.1",
              "flashinfer-cubin not installed"),
)  # fmt: skip


def test_the_runners_downgrade_for_speculation_wins_over_the_config_line():
    """The config line says FULL_AND_PIECEWISE; the model runner, resolving the mode against an
    attention backend that cannot run full graphs with spec-decode, sets PIECEWISE: the arm ran
    with PIECEWISE, and its baseline (no speculation) with FULL_AND_PIECEWISE."""
    report = parse_engine_report([*GPU_V2_LOG[:2], SPEC_DECODE_DOWNGRADE, *GPU_V2_LOG[2:]])

    assert report.cuda_graphs == "PIECEWISE"
    assert report.evidence["cuda_graphs"].endswith("; setting cudagraph_mode=PIECEWISE")
    assert parse_engine_report(GPU_V2_LOG).cuda_graphs == "FULL_AND_PIECEWISE"


def test_the_last_override_wins_and_an_override_to_none_is_off():
    chained = parse_engine_report([*GPU_V2_LOG[:2], DYNAMIC_SPEC_OVERRIDE, SPEC_DECODE_DOWNGRADE, *GPU_V2_LOG[2:]])
    assert chained.cuda_graphs == "PIECEWISE"
    assert parse_engine_report([*GPU_V2_LOG[:2], DYNAMIC_SPEC_OVERRIDE, *GPU_V2_LOG[2:]]).cuda_graphs == "PIECEWISE"
    off = parse_engine_report([*GPU_V2_LOG[:2], STOCK_COMPILE_OVERRIDE])
    assert off.cuda_graphs == "off"
    assert off.evidence["cuda_graphs"].startswith("CUDA graphs are not supported with stock torch.compile")


def test_flashinfer_turned_off_or_without_its_kernels_is_recorded_with_its_line():
    disabled = parse_engine_report([*GPU_V2_LOG, FLASHINFER_DISABLED_LINE])
    missing = parse_engine_report([*GPU_V2_LOG, KERNELS_MISSING_LINE])

    assert (disabled.flashinfer, missing.flashinfer) == ("disabled", "kernels missing")
    assert disabled.record()["engine_log_lines"]["flashinfer"].startswith("FlashInfer kernels are disabled")
    assert "flashinfer-python 0.6.1" in missing.evidence["flashinfer"]
    assert parse_engine_report(GPU_V2_LOG).flashinfer is None
