"""The import form: a name and one or more `vllm bench serve` result files. Every file is read
and checked here (experiments/bench_files.py), and grouped into arms (experiments/imports.py),
so that a bad file is refused with its name before anything is stored."""

from django import forms

from experiments import bench_files
from experiments.forms import TeamForm, reject_controls, reject_markup
from experiments.imports import arms_from_files


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files from one input (Django's documented recipe)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput(attrs={"accept": ".json,application/json"}))
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        single = super().clean
        return [single(item, initial) for item in data] if isinstance(data, list | tuple) else [single(data, initial)]


def read_uploads(uploads) -> list[tuple[str, bytes]]:
    """(name, bytes) of each upload; a file over the size limit is refused before it is read."""
    too_big = [
        f"{upload.name}: {upload.size:,} bytes, more than the {bench_files.MAX_FILE_BYTES:,} a result file may have."
        for upload in uploads
        if upload.size > bench_files.MAX_FILE_BYTES
    ]
    if too_big:
        raise forms.ValidationError(too_big)
    return [(upload.name, upload.read()) for upload in uploads]


class BenchImportForm(TeamForm):
    name = forms.CharField(max_length=200, validators=[reject_markup, reject_controls])
    files = MultipleFileField(
        label="Result files",
        help_text=f"JSON files written by vllm bench serve --save-result (with or without --save-detailed), at most "
        f"{bench_files.MAX_FILES}, each at most {bench_files.MAX_FILE_BYTES // 1024 // 1024} MB. Select every file "
        "of a directory at once.",
    )

    def clean_files(self) -> list[bench_files.BenchFile]:
        try:
            read = bench_files.bench_files_read(read_uploads(self.cleaned_data["files"]))
            arms_from_files(read)
        except bench_files.BenchFileRefused as refused:
            raise forms.ValidationError(str(refused).split("\n")) from None
        return read
