"""Model fields of our own."""

from collections.abc import Iterable
from typing import Any

from django.db import models

from experiments.measurement.encoding.packed import PACKINGS, pack, unpack


class PackedArrayField(models.BinaryField):
    """A list of numbers stored as packed little-endian bytes (experiments/measurement/encoding/packed.py), read
    back as a list of Python numbers: the ORM, the API and the downloads see lists as they
    did when these columns were PostgreSQL arrays; None is NULL and [] is empty bytes."""

    # What the django-stubs plugin types the model attribute as: a list of numbers or the packed
    # bytes written, and a list read back (of ints or floats, by `element`). The stubs' BinaryField
    # reads back bytes, which from_db_value here does not.
    _pyi_private_set_type: Iterable[float] | bytes | memoryview
    _pyi_private_get_type: list[Any]  # type: ignore[assignment]

    def __init__(self, *args, element: str, **kwargs):
        self.element = element
        self.packing = PACKINGS[element]
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        kwargs["element"] = self.element
        return name, path, args, kwargs

    def from_db_value(self, value, expression, connection):
        return unpack(value, self.packing)

    def to_python(self, value):
        if value is None or isinstance(value, list):
            return value
        return unpack(super().to_python(value), self.packing)

    def get_prep_value(self, value):
        if isinstance(value, bytes | memoryview):
            return value
        return pack(value, self.packing)

    def value_to_string(self, obj):
        return self.value_from_object(obj)
