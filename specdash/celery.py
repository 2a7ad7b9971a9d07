import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "specdash.settings")

app = Celery("specdash")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])

# The workers' own remote-control commands (`celery -A specdash inspect hardware`): registered
# wherever the app loads, since the command line checks a command's name before it asks.
import workers.control_commands  # noqa: E402, F401
