"""The page's account of an experiment run on a fleet (issue 38): which worker ran each block, on
which host and GPUs, in which completion place, what became of earlier attempts; which workers
took part, and which were passed over and why (their hardware class differs from the
experiment's: experiments/execution/hardware_class.py). None for an experiment whose blocks were
not dispatched one by one (one worker held it whole)."""

from dataclasses import dataclass

from experiments.execution.hardware_class import HardwareClass
from experiments.models import Block, Experiment, FleetWorker


@dataclass(frozen=True)
class FleetMember:
    name: str
    host: str
    gpu_ids: str
    hardware: str  # HardwareClass.label
    reason: str  # why it was passed over; "" when it took part


@dataclass(frozen=True)
class Fleet:
    blocks: list[Block]
    took_part: list[FleetMember]
    passed_over: list[FleetMember]
    hardware: str  # the experiment's hardware class, as the first claim set it; "" before

    @property
    def hosts(self) -> int:
        return len({block.worker_host for block in self.blocks if block.worker_host})


def _member(row: FleetWorker) -> FleetMember:
    label = HardwareClass.of(row.hardware).label
    return FleetMember(row.worker_name, row.worker_host, row.gpu_ids, label, row.reason)


def experiment_fleet(*, experiment: Experiment) -> Fleet | None:
    blocks = list(Block.objects.filter(experiment_id=experiment.id).order_by("number"))
    if not blocks:
        return None
    rows = list(FleetWorker.objects.filter(experiment_id=experiment.id))
    took_part = [_member(row) for row in rows if row.took_part]
    passed_over = [_member(row) for row in rows if not row.took_part]
    return Fleet(blocks, took_part, passed_over, took_part[0].hardware if took_part else "")
