"""Logging in as a user does, for the browser tests that open pages of their own."""

from tests.factories import PASSWORD


def log_in(page, base_url: str, username: str) -> None:
    """Log in through the login form and wait for the history, the page it leads to."""
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click(".login [type=submit]")
    page.wait_for_url(f"{base_url}/")
