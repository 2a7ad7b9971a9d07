"""The rules for what users type, one copy for every door (forms, API, uploads, imports)."""
