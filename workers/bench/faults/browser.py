"""Log in and post forms as a person would, cookies and CSRF token included."""

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request


class Browser:
    def __init__(self, url: str):
        self.url = url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str, **headers: str) -> tuple[int, str]:
        try:
            with self.opener.open(urllib.request.Request(self.url + path, headers=headers), timeout=30) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, path: str, data: dict[str, str]) -> tuple[int, str]:
        _, page = self.get(path)
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert found is not None, f"no CSRF token on {path}"
        body = urllib.parse.urlencode(data | {"csrfmiddlewaretoken": found.group(1)}, doseq=True).encode()
        request = urllib.request.Request(self.url + path, data=body, headers={"Referer": self.url + path})
        try:
            with self.opener.open(request, timeout=60) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
