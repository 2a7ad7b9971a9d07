"""The API's JSON body parser: DRF's, reading with the rules every other door reads JSON by
(experiments/rules/json_input.py): nesting bounded before parsing, NaN and Infinity refused, and a
NUL or a lone surrogate in any string refused. A refusal is a 400 that says where."""

import codecs
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from experiments.rules import json_input


class JSONParser(parsers.JSONParser):
    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except UnicodeDecodeError as error:
            byte = error.object[error.start]
            raise ParseError(f"The body is not {encoding} text (byte 0x{byte:02x} at {error.start}).") from None
        try:
            data = json_input.loads(text)
        except ValueError as error:  # json.JSONDecodeError included
            raise ParseError(f"The body is not valid JSON: {error}.") from None
        problem = json_input.problem(data)
        if problem:
            raise ParseError(f"The body holds {problem} in a text, which cannot be stored.")
        return data
