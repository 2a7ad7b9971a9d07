"""One hardware class per experiment (issue 38): the workers that may take its blocks are those
whose fingerprint matches the first block's. A block ratio compares arms on one host, so blocks of
different hosts are replicates only when the hosts are the same kind of machine running the same
software: GPU model and count, driver, vLLM and torch versions, and on a CPU host the CPU model.

The worker reads its own fingerprint once (workers/host/fingerprint.py) and reports it with
`celery inspect hardware` (workers/control_commands.py). Plain: no Django.
"""

from collections.abc import Mapping
from dataclasses import asdict, dataclass

# (field, how the page names it) in the order the differences are listed.
FIELDS = (
    ("gpu_name", "GPU model"),
    ("gpu_count", "GPU count"),
    ("gpu_driver", "GPU driver"),
    ("vllm_version", "vLLM version"),
    ("torch_version", "torch version"),
    ("cpu_model", "CPU model"),
)


@dataclass(frozen=True)
class HardwareClass:
    """A worker's fingerprint. `cpu_model` is part of it on CPU hosts only: on a GPU host the
    GPUs do the work, and hosts of one GPU pool often differ in their CPUs."""

    gpu_name: str = ""
    gpu_count: int = 0
    gpu_driver: str = ""
    vllm_version: str = ""
    torch_version: str = ""
    cpu_model: str = ""

    @classmethod
    def of(cls, values: Mapping[str, object]) -> "HardwareClass":
        """From a stored or reported mapping (unknown keys ignored, missing ones empty)."""
        gpu_count = int(str(values.get("gpu_count") or 0))
        return cls(
            gpu_name=str(values.get("gpu_name") or ""),
            gpu_count=gpu_count,
            gpu_driver=str(values.get("gpu_driver") or ""),
            vllm_version=str(values.get("vllm_version") or ""),
            torch_version=str(values.get("torch_version") or ""),
            cpu_model="" if gpu_count else str(values.get("cpu_model") or ""),
        )

    def record(self) -> dict[str, object]:
        return asdict(self)

    @property
    def label(self) -> str:
        """ "2 × NVIDIA H100, driver 570.1, vLLM 0.32.0, torch 2.13.0" or "CPU: …, vLLM …"."""
        device = f"{self.gpu_count} × {self.gpu_name}" if self.gpu_count else f"CPU: {self.cpu_model or 'unknown'}"
        driver = f", driver {self.gpu_driver}" if self.gpu_driver else ""
        return f"{device}{driver}, vLLM {self.vllm_version or '?'}, torch {self.torch_version or '?'}"


def differences(reference: HardwareClass, other: HardwareClass) -> list[str]:
    """How `other` differs from `reference`, one phrase per field: empty when they match."""
    mine, theirs = reference.record(), other.record()
    return [
        f"{name} {_shown(theirs[key])} where the experiment's is {_shown(mine[key])}"
        for key, name in FIELDS
        if mine[key] != theirs[key]
    ]


def _shown(value: object) -> str:
    return "unknown" if value == "" else str(value)


def passed_over_reason(reference: HardwareClass, other: HardwareClass) -> str:
    """Why a worker of this class may not take the experiment's blocks; "" when it may."""
    found = differences(reference, other)
    return "; ".join(found)
