"""The import form: a name, one or more `vllm bench serve` result files and the methods of
files that do not name theirs. Every file is read and checked here (experiments/imports/bench_files.py),
given its stated method (experiments/imports/methods.py) and grouped into arms
(experiments/imports/services.py), so that a bad file or line is refused by name before anything is
stored; the cleaned files carry their stated methods to the import."""

from django import forms

from experiments.form_kit import TeamForm, reject_controls, reject_markup
from experiments.imports import bench_files
from experiments.imports import methods as import_methods
from experiments.imports.services import arms_from_files
from experiments.models import Arm


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
    # A declared field: the form's metaclass moves it to base_fields, so it does not shadow the
    # uploads that BaseForm keeps in self.files, as the stubs take a class attribute to do.
    files = MultipleFileField(  # type: ignore[assignment]
        label="Result files",
        help_text=f"JSON files written by vllm bench serve --save-result (with or without --save-detailed), at most "
        f"{bench_files.MAX_FILES}, each at most {bench_files.MAX_FILE_BYTES // 1024 // 1024} MB. Select every file "
        "of a directory at once.",
    )
    methods = forms.CharField(
        label="Methods for files without a speculative config",
        required=False,
        strip=False,  # so that a refusal's line number is the line the user sees
        widget=forms.Textarea(attrs={"rows": 3, "class": "mono"}),
        help_text="One line per arm: its label (or, for a file without a label, its file name) = method k, e.g. "
        '“ngram k=3 = ngram 3”; or = a speculative config as JSON, e.g. “ngram k=3 = {"method": "ngram", '
        '"num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}”. Methods: '
        f"{', '.join(Arm.PARAM_KEYS)}. With method and k only, the arm stores no other settings "
        "(no n-gram lengths, no draft model path).",
    )

    def clean_files(self) -> list[bench_files.BenchFile]:
        try:
            return bench_files.bench_files_read(read_uploads(self.cleaned_data["files"]))
        except bench_files.BenchFileRefused as refused:
            raise forms.ValidationError(str(refused).split("\n")) from None

    def clean_methods(self) -> dict[str, bench_files.StatedMethod]:
        try:
            return import_methods.methods_parse(self.cleaned_data["methods"])
        except bench_files.BenchFileRefused as refused:
            raise forms.ValidationError(str(refused)) from None

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        files, stated = cleaned.get("files"), cleaned.get("methods")
        if files is None or stated is None:
            return cleaned
        try:
            files = import_methods.files_with_methods(files, stated)
        except bench_files.BenchFileRefused as refused:
            self.add_error("methods", str(refused).split("\n"))
            return cleaned
        try:
            arms_from_files(files)
        except bench_files.BenchFileRefused as refused:
            self.add_error("files", str(refused).split("\n"))
            return cleaned
        cleaned["files"] = files
        return cleaned
