"""Celery remote-control commands of specdash's workers (registered by specdash/celery.py).

`celery -A specdash inspect hardware` answers with the host and what it computes on, named
as the environment snapshot names them (workers/host/envinfo.py), so that the experiment form can
say what each live queue runs on before any run has recorded it, and a worker finishing a block
can count the idle workers of its hardware class (experiments/execution/fleet_capacity.py). The command runs in the
worker's main process, which must answer within the web server's short wait even while it
holds an experiment: the hardware is read once, when the worker starts, not on each ask.
"""

import os
import socket

from celery.signals import worker_init
from celery.worker.control import inspect_command

from workers.host import fingerprint

_hardware: dict = {}


@worker_init.connect
def _read_hardware(**kwargs) -> None:
    _hardware.update(read_hardware())


def read_hardware() -> dict:
    """This host's name, CPU and the GPUs this worker's children may use (CUDA_VISIBLE_DEVICES),
    with the rest of its hardware class (driver, vLLM and torch versions: workers/host/fingerprint.py),
    which decides whether it may take an experiment's blocks."""
    from django.conf import settings  # the app is loaded in every worker process

    return {
        **fingerprint.worker_fingerprint(settings.SPECDASH_VLLM_PYTHON),
        "host_name": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "gpu_ids": fingerprint.gpu_ids(),
    }


@inspect_command()
def hardware(state) -> dict:
    """The host and its CPU and GPUs, as read when the worker started."""
    return dict(_hardware)
