from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "experiments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the signal that puts every new user in the default team.
        from experiments import teams  # noqa: F401
