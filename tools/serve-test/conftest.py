"""Fixtures: a running `assay serve` on SmolLM2 on a free loopback port (backend from
$ASSAY_SERVE_BACKEND: `cpu` by default, `cuda` on a GPU machine), with an API key made by
`assay keys new`, and OpenAI clients pointed at it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import openai
import pytest

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "smol"
BACKEND = os.environ.get("ASSAY_SERVE_BACKEND", "cpu")


def models_dir() -> Path:
    d = os.environ.get("ASSAY_MODELS_DIR")
    return Path(d) if d else Path.home() / ".cache/assay/models"


class Server:
    """One `assay serve` process; stderr is collected in the background."""

    def __init__(self, *extra: str, keys: Path | None = None):
        path = models_dir() / SMOL
        if not path.exists():
            pytest.skip(f"{path} not found (tools/fetch-models)")
        args = [os.environ["ASSAY_BIN"], "serve", "--model", f"{MODEL}={path}", "--port", "0",
                "--threads", "2", "--ctx", "2048", "--kv-mb", "256", "--backend", BACKEND, *extra]
        if keys is not None:
            args += ["--api-keys", str(keys)]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = None
        got = threading.Event()

        def pump():
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    got.set()
            got.set()

        threading.Thread(target=pump, daemon=True).start()
        if not got.wait(120) or self.url is None:
            self.stop()
            raise RuntimeError("assay serve did not start:\n" + "".join(self.lines))
        import httpx2 as httpx  # the SDK's HTTP client
        deadline = time.time() + 120
        while time.time() < deadline:
            if httpx.get(self.url + "/ready").status_code == 200:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("assay serve never became ready")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def key_file():
    d = tempfile.mkdtemp(prefix="assay-keys-")
    f = Path(d) / "keys"
    out = subprocess.run([os.environ["ASSAY_BIN"], "keys", "new", "--file", str(f), "--label", "tests"],
                         check=True, capture_output=True, text=True)
    key = out.stdout.strip()
    assert key and key not in f.read_text(), "the key is printed, only its hash stored"
    return f, key


@pytest.fixture(scope="session")
def server(key_file):
    s = Server(keys=key_file[0])
    yield s
    assert s.alive(), "the server died during the tests:\n" + "".join(s.lines[-50:])
    assert s.stop() == 0


@pytest.fixture(scope="session")
def client(server, key_file):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key_file[1], max_retries=0, timeout=300)


@pytest.fixture(scope="session")
def http(server, key_file):
    import httpx2 as httpx
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key_file[1]}"}, timeout=300)
