"""How recorded numbers are stored: packed little-endian lists (`packed`) and output token ids
(`token_ids`)."""
