"""A played scenario's row, and the table the harness prints (docs/faults.md keeps one)."""

from dataclasses import dataclass


@dataclass
class Row:
    scenario: str
    done: str
    outcome: str
    lost: int
    duplicated: int
    recover_s: float | None


def table(rows: list[Row]) -> str:
    lines = [
        "| scenario | what was done | outcome | runs lost | rows duplicated | seconds to recover |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        seconds = "–" if r.recover_s is None else f"{r.recover_s:.1f}"
        lines.append(f"| {r.scenario} | {r.done} | {r.outcome} | {r.lost} | {r.duplicated} | {seconds} |")
    return "\n".join(lines)
