"""How output token ids are stored: RequestRecord.output_token_ids holds them as unsigned
32-bit little-endian integers, 4 bytes a token (docs/verdicts.md gives the storage cost), by
the rule of experiments/measurement/encoding/packed.py. Shared by the worker that writes them and the analysis
and exports that read them."""

from collections.abc import Iterable

from experiments.measurement.encoding.packed import UINT32, pack, unpack


def pack_token_ids(token_ids: Iterable[int]) -> bytes:
    """4 bytes a token, the same on every host."""
    return pack(token_ids, UINT32)


def unpack_token_ids(packed: bytes | memoryview | None) -> list[int]:
    """The inverse of pack_token_ids; an empty list for no data."""
    return unpack(packed, UINT32) or []
