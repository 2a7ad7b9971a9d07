"""Input-length distributions for synthetic workloads: every prompt the same length, lengths
drawn uniformly from a range, or from a histogram of lengths with weights.

An uploaded set has lengths of its own; there a length or a range selects the set's prompts
of that many words (workloads.uploaded_selection).

Written as the form takes it, in words (synthetic prompts are words; each is at least one
token): "64" (fixed), "16-256" (uniform), "16:3, 128:5, 1024:2" (16 words with weight 3, ...).
Free of Django, like experiments/prompts/catalog.py, which draws the prompts.
"""

import random
import re
from dataclasses import dataclass

MAX_LENGTH = 1_048_576
MAX_BINS = 20


@dataclass(frozen=True)
class LengthDistribution:
    lengths: tuple[int, ...]  # fixed: one; uniform: low and high; histogram: one per bin
    weights: tuple[float, ...] = ()  # histogram only
    uniform: bool = False

    @property
    def shortest(self) -> int:
        return min(self.lengths)

    @property
    def longest(self) -> int:
        return max(self.lengths)

    def word_range(self) -> tuple[int, int]:
        """The lengths an uploaded set's prompts are selected by: one length, or a range. A
        histogram cannot select from prompts whose lengths are already given."""
        if self.weights:
            raise ValueError(
                "For an uploaded set, give one length or a range (e.g. 100-400): the set's prompts of that many "
                "words are sent, in file order."
            )
        return self.shortest, self.longest

    def draw(self, count: int, seed: int) -> list[int]:
        """`count` lengths, the same for a seed (and the first n independent of `count`)."""
        rng = random.Random(f"input-lengths-{seed}")
        if self.uniform:
            return [rng.randint(*self.lengths) for _ in range(count)]
        if self.weights:
            return [rng.choices(self.lengths, weights=self.weights)[0] for _ in range(count)]
        return [self.lengths[0]] * count


def _length(token: str) -> int:
    if not re.fullmatch(r"\d{1,7}", token) or not 1 <= int(token) <= MAX_LENGTH:
        raise ValueError(f"“{token[:20]}” is not a length between 1 and {MAX_LENGTH:,}.")
    return int(token)


def _weight(token: str) -> float:
    try:
        weight = float(token)
    except ValueError:
        raise ValueError(f"“{token[:20]}” is not a weight (a positive number).") from None
    if not 0 < weight < float("inf"):
        raise ValueError(f"“{token[:20]}” is not a weight (a positive number).")
    return weight


def parse_length_distribution(text: str) -> LengthDistribution:
    """The distribution a text describes; ValueError with a message for the form otherwise."""
    text = text.strip()
    if ":" in text:
        bins = [part.strip() for part in text.split(",") if part.strip()]
        if len(bins) > MAX_BINS:
            raise ValueError(f"At most {MAX_BINS} lengths in a histogram (got {len(bins)}).")
        pairs = [bin_.split(":", 1) for bin_ in bins]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError("Write a histogram as length:weight pairs, e.g. 16:3, 128:5, 1024:2.")
        lengths = tuple(_length(length.strip()) for length, _ in pairs)
        if len(set(lengths)) != len(lengths):
            raise ValueError("A length is listed twice in the histogram.")
        return LengthDistribution(lengths, tuple(_weight(weight.strip()) for _, weight in pairs))
    if "-" in text:
        low, high = (_length(part.strip()) for part in text.split("-", 1))
        if low >= high:
            raise ValueError(f"The range's low end ({low}) must be below its high end ({high}).")
        return LengthDistribution((low, high), uniform=True)
    return LengthDistribution((_length(text),))
