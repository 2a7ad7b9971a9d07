"""How output token ids are stored: RequestRecord.output_token_ids holds them as unsigned
32-bit little-endian integers, 4 bytes a token (docs/verdicts.md gives the storage cost).
Plain Python, shared by the worker that writes them and the analysis and exports that read them."""

import struct
from collections.abc import Sequence


def pack_token_ids(token_ids: Sequence[int]) -> bytes:
    """4 bytes a token, the same on every host."""
    return struct.pack(f"<{len(token_ids)}I", *token_ids)


def unpack_token_ids(packed: bytes | memoryview | None) -> list[int]:
    """The inverse of pack_token_ids; an empty list for no data."""
    if not packed:
        return []
    return list(struct.unpack(f"<{len(packed) // 4}I", bytes(packed)))
