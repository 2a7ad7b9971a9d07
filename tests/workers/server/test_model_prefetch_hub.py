"""The model prefetch for real: the vLLM environment's huggingface_hub fetches a model id
from a hub on loopback (it serves the demo draft model's files as a Hugging Face
repository would) into a fresh cache, where vLLM's offline loading then finds it."""

import hashlib
import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings

from workers.server.model_prefetch import FETCH_PATTERNS, ModelPrefetch

REPO = "specdash-test/draft"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
DRAFT = Path(settings.SPECDASH_MODELS_DIR) / "draft"
NOT_FETCHED = "notes.md"  # in the repository, matched by no pattern of the prefetch


OFFLINE_LOAD = """
import sys
from huggingface_hub import hf_hub_download
from vllm.model_executor.model_loader.weight_utils import download_weights_from_hf
folder = download_weights_from_hf(sys.argv[1], cache_dir=None, allow_patterns=["*.safetensors"])
hf_hub_download(sys.argv[1], "config.json")
print(folder)
"""


class Hub(BaseHTTPRequestHandler):
    """The three requests huggingface_hub's snapshot_download makes: the revision, the
    file tree, and each file (HEAD for its metadata, then GET)."""

    files: dict[str, bytes]
    requested: list[str]

    def log_message(self, *args):
        pass

    def _send(self, body: bytes, headers: dict[str, str], *, head: bool = False):
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, value):
        self._send(json.dumps(value).encode(), {"Content-Type": "application/json"})

    def _file(self, head: bool):
        name = self.path.split(f"/{REPO}/resolve/{COMMIT}/", 1)[1]
        self.requested.append(f"{self.command} {name}")
        body = self.files[name]
        etag = hashlib.sha1(body).hexdigest()
        self._send(body, {"X-Repo-Commit": COMMIT, "ETag": f'"{etag}"'}, head=head)

    def do_HEAD(self):
        self._file(head=True)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path.startswith(f"/api/models/{REPO}/revision/"):
            siblings = [{"rfilename": name} for name in self.files]
            self._json({"id": REPO, "modelId": REPO, "sha": COMMIT, "siblings": siblings, "private": False})
        elif path.startswith(f"/api/models/{REPO}/tree/"):
            tree = [
                {"type": "file", "path": name, "size": len(body), "oid": hashlib.sha1(body).hexdigest()}
                for name, body in self.files.items()
            ]
            self._json(tree)
        else:
            self._file(head=False)


@pytest.fixture
def hub():
    files = {path.name: path.read_bytes() for path in sorted(DRAFT.iterdir())} | {NOT_FETCHED: b"not a model file"}
    handler = type("DraftHub", (Hub,), {"files": files, "requested": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", handler
    server.shutdown()


@pytest.mark.vllm
def test_a_model_id_is_fetched_into_the_cache_vllm_reads_offline(hub, tmp_path, monkeypatch):
    endpoint, handler = hub
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    with ModelPrefetch(
        ["/srv/specdash/models/target", REPO], python=settings.SPECDASH_VLLM_PYTHON, log_path=tmp_path / "fetch.log"
    ) as prefetch:
        outcome = prefetch.wait(120)
    assert outcome == "fetched", (tmp_path / "fetch.log").read_text()

    # What vLLM does with a model id on a host without network: its weight loader and the
    # configuration's download, each finding the files in the cache.
    found = subprocess.run(
        [settings.SPECDASH_VLLM_PYTHON, "-c", OFFLINE_LOAD, REPO],
        env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr[-3000:]
    snapshot = Path(found.stdout.strip().splitlines()[-1])
    assert snapshot.is_relative_to(tmp_path / "hf")
    for path in DRAFT.iterdir():
        assert (snapshot / path.name).read_bytes() == path.read_bytes(), path.name
    assert not (snapshot / NOT_FETCHED).exists()
    assert not any(NOT_FETCHED in request for request in handler.requested)
    assert {"*.json", "*.safetensors"} <= set(FETCH_PATTERNS)
