"""Counts over the simulated experiments of one row of a table: false calls, power, what
settled, blocks and device-minutes."""

from dataclasses import dataclass

from experiments.measurement.stats import sequential
from experiments.simulation.decisions import Result
from experiments.simulation.simulator import Shape

CALLED = (sequential.FASTER, sequential.SLOWER)
SETTLED_NULL = (sequential.EQUIVALENT, sequential.NOT_WORTH_IT)


@dataclass
class Tally:
    """Counts over experiments of one row."""

    experiments: int = 0
    family_false: int = 0  # any candidate cell called faster or slower (at no effect)
    replicate_false: int = 0
    cells: int = 0
    cells_called: int = 0
    cells_faster: int = 0
    cells_settled_null: int = 0
    arms: int = 0
    arms_all_faster: int = 0
    arms_settled_null: int = 0
    blocked: int = 0  # cells with a no-call reason (failure rates differ)
    blocks: int = 0
    minutes: float = 0.0

    def add(self, result: Result, shape: Shape) -> None:
        candidates, replicate = result.decided.candidates, result.decided.replicate
        self.experiments += 1
        self.family_false += any(d.outcome in CALLED for d in candidates)
        self.replicate_false += any(d.outcome in CALLED for d in replicate)
        self.cells += len(candidates)
        self.cells_called += sum(d.outcome in CALLED for d in candidates)
        self.cells_faster += sum(d.outcome == sequential.FASTER for d in candidates)
        self.cells_settled_null += sum(d.outcome in SETTLED_NULL for d in candidates)
        self.blocked += sum(d.outcome not in (*sequential.SETTLED, sequential.INCONCLUSIVE) for d in candidates)
        for arm in shape.candidate_arms:
            mine = [d for d in candidates if d.key[0] == arm]
            self.arms += 1
            self.arms_all_faster += all(d.outcome == sequential.FASTER for d in mine)
            self.arms_settled_null += all(d.outcome in SETTLED_NULL for d in mine)
        self.blocks += result.blocks
        self.minutes += result.minutes

    def share(self, name: str, of: str = "experiments") -> float:
        return float(getattr(self, name)) / max(1, int(getattr(self, of)))

    @property
    def mean_blocks(self) -> float:
        return self.blocks / max(1, self.experiments)

    @property
    def mean_minutes(self) -> float:
        return self.minutes / max(1, self.experiments)
