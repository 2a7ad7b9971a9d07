"""The upload form of a prompt set: a name and one file, read and checked in full here
(experiments/prompts/uploads.py) so that a bad file stores nothing."""

from django import forms

from experiments.form_kit import TeamForm
from experiments.prompts import uploads as prompt_uploads


class PromptSetUploadForm(TeamForm):
    name = forms.SlugField(
        max_length=48,
        help_text="Letters, digits, - and _. Uploading other content under a name makes its next version.",
    )
    file = forms.FileField(
        help_text=f'JSONL of prompts ({{"prompt": …, "category": …}} a line), JSONL of chat messages '
        f'({{"messages": [{{"role": "user", "content": …}}], "category": …}}) or a ShareGPT JSON array; '
        f"at most {prompt_uploads.MAX_FILE_BYTES // 1024 // 1024} MB and {prompt_uploads.MAX_PROMPTS:,} prompts."
    )

    def clean_file(self) -> prompt_uploads.PromptFile:
        upload = self.cleaned_data["file"]
        if upload.size > prompt_uploads.MAX_FILE_BYTES:
            raise forms.ValidationError(
                f"{upload.name}: {upload.size:,} bytes, more than the {prompt_uploads.MAX_FILE_BYTES:,} a prompt file "
                "may have."
            )
        try:
            parsed = prompt_uploads.prompt_file_read(upload.name, upload.read())
        except prompt_uploads.PromptFileRefused as refused:
            raise forms.ValidationError(str(refused)) from None
        self.upload = upload
        return parsed
