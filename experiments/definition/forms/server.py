"""The experiment form's target model and the server it runs on: the model path, the worker
queue, dtype, vLLM version, model length, tensor parallel size and the "Server settings" group
every arm shares (experiments/rules/server_settings.py)."""

from django import forms
from django.conf import settings

from experiments.definition.forms.fields import setting_field
from experiments.execution import worker_queues
from experiments.form_kit import clean_model_path
from experiments.models import MAX_TENSOR_PARALLEL_SIZE
from experiments.rules import server_settings

DTYPE_CHOICES = [
    ("auto", "auto"),
    ("float32", "float32"),
    ("bfloat16", "bfloat16"),
    ("float16", "float16"),
]


def default_target_model() -> str:
    return str(settings.SPECDASH_MODELS_DIR / "target")


def reject_control_queue(value: str) -> None:
    """The control worker would hold an experiment for hours while the reaper and the
    dispatcher wait behind it."""
    if value == worker_queues.CONTROL_QUEUE:
        raise forms.ValidationError(
            f"“{value}” is the queue of the reaper and the dispatcher; experiments run on a worker pool's queue."
        )


class ServerFields(forms.Form):
    """The target model and its server, the same for the baseline and every arm."""

    target_model = forms.CharField(
        max_length=500,
        initial=default_target_model,
        help_text="Path of the model directory on the worker host.",
    )
    worker_queue = forms.SlugField(
        max_length=64,
        initial="cpu",
        help_text="Celery queue of the worker pool, e.g. cpu or h100.",
        validators=[reject_control_queue],
        # The page lists the queues that have live workers (experiments/execution/worker_queues.py) in
        # this datalist; any other name is accepted, and the experiment waits for a worker.
        widget=forms.TextInput(attrs={"list": "live-queues", "autocomplete": "off"}),
    )
    dtype = forms.ChoiceField(choices=DTYPE_CHOICES, initial="auto")
    requested_vllm_version = forms.RegexField(
        regex=r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$",
        max_length=64,
        required=False,
        label="vLLM version",
        help_text="Recorded as asked for; the worker runs the version installed on its host, and each run records it.",
        error_messages={"invalid": "A version such as 0.33.0 or 0.33.0rc1."},
    )
    max_model_len = forms.IntegerField(min_value=16, max_value=1_048_576, initial=512, label="Max model length")
    tensor_parallel_size = forms.IntegerField(
        min_value=1,
        max_value=MAX_TENSOR_PARALLEL_SIZE,
        initial=1,
        required=False,
        label="Tensor parallel size",
        help_text="GPUs each vLLM server spans (--tensor-parallel-size). The queue's workers must each see that many "
        "GPUs; a worker that sees fewer fails the runs before starting a server. CPU workers run 1.",
    )
    # The "Server settings" group (experiments/rules/server_settings.py): the same for every arm.
    gpu_memory_utilization = setting_field(server_settings.BY_NAME["gpu_memory_utilization"])
    kv_cache_memory_bytes = setting_field(server_settings.BY_NAME["kv_cache_memory_bytes"])
    max_num_seqs = setting_field(server_settings.BY_NAME["max_num_seqs"])
    max_num_batched_tokens = setting_field(server_settings.BY_NAME["max_num_batched_tokens"])
    kv_cache_dtype = setting_field(server_settings.BY_NAME["kv_cache_dtype"])
    quantization = setting_field(server_settings.BY_NAME["quantization"])

    @property
    def server_setting_fields(self) -> list[forms.BoundField]:
        """The "Server settings" group, in the order of the list."""
        return [self[setting.name] for setting in server_settings.SERVER_SETTINGS]

    def clean_tensor_parallel_size(self) -> int:
        """Left empty (or not posted by an older client): one GPU per server."""
        return self.cleaned_data["tensor_parallel_size"] or 1

    def clean_target_model(self):
        return clean_model_path(self.cleaned_data["target_model"])

    def _check_batch(self, cleaned):
        problem = server_settings.batch_problem(cleaned)
        if problem:
            self.add_error("max_num_batched_tokens", f"Max batched tokens per step {problem}.")
