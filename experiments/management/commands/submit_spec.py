"""Submit an experiment from a spec file on the server itself, as the API would take it, and
judge it as experiments/api/client.py does (the same options, table and exit status)."""

import argparse
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from experiments.api import client as specdash_client
from experiments.api import payloads
from experiments.api.submission import SpecInvalid, submission_from_spec
from experiments.definition import services as definition
from experiments.models import Experiment


class LocalApi:
    """The API's answers built in this process: the same submission rules and payloads."""

    def __init__(self, owner):
        self.owner = owner

    def submit(self, spec: dict) -> dict:
        try:
            submission = submission_from_spec(spec, user=self.owner)
        except SpecInvalid as invalid:
            raise specdash_client.Refused(invalid.messages) from None
        experiment = definition.experiment_create(owner=self.owner, arms=submission.arms, **submission.fields)
        return payloads.experiment_payload(experiment)

    def _get(self, experiment_id: int) -> Experiment:
        try:
            return Experiment.objects.visible_to(self.owner).get(pk=experiment_id)
        except Experiment.DoesNotExist:
            raise specdash_client.Refused([f"There is no experiment {experiment_id}."]) from None

    def experiment(self, experiment_id: int) -> dict:
        return payloads.experiment_payload(self._get(experiment_id))

    def progress(self, experiment_id: int) -> dict:
        return payloads.progress_payload(self._get(experiment_id))

    def results(self, experiment_id: int) -> dict:
        return payloads.results_payload(self._get(experiment_id))


class Command(BaseCommand):
    help = specdash_client.__doc__.split("\n\n")[0]

    def add_arguments(self, parser):
        specdash_client.add_arguments(parser)
        parser.add_argument("--owner", required=True, help="username the experiment belongs to")

    def handle(self, *args, **options):
        try:
            owner = get_user_model().objects.get_by_natural_key(options["owner"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"There is no user {options['owner']!r}.") from None
        parser = self.create_parser("manage.py", "submit_spec")
        api = LocalApi(owner)
        self.stdout.ending = ""  # the client prints whole lines
        sys.exit(specdash_client.run_from_arguments(parser, argparse.Namespace(**options), api, out=self.stdout))
