"""The MLflow UI as a browser shows it: `mlflow ui` over a tracking store, read by headless Chromium (the page's
text after its JavaScript ran, and screenshots)."""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from PIL import Image

MLFLOW = Path(sys.executable).with_name("mlflow")
# the UI is a JavaScript app: let its requests and rendering finish in virtual time before the DOM or pixels are read
BUDGET_MS = 15000
SIZE = (1400, 900)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class MlflowUi:
    """`mlflow ui` on a free 127.0.0.1 port over `store` (a SQLite tracking URI); a context manager."""

    def __init__(self, store: str, log: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.store, self.log, self.proc = store, log, None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MlflowUi:
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        args = [str(MLFLOW), "ui", "--backend-store-uri", self.store, "--host", "127.0.0.1", "--port", str(self.port),
                "--workers", "1"]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow ui exited ({self.proc.returncode}); see {self.log}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"mlflow ui not up after 180 s; see {self.log}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
            self.proc = None


def _chromium(*args: str) -> subprocess.CompletedProcess:
    browser = chromium()
    if browser is None:
        raise RuntimeError("no chromium on PATH (Debian: apt-get install chromium)")
    # a fresh profile per call: no state of an earlier page (or of the user's browser) changes what is shown
    with tempfile.TemporaryDirectory(prefix="atlas-chromium-") as profile:
        return subprocess.run(
            # as root (CI) only without the sandbox; no GPU; no update or telemetry traffic from the browser itself.
            # Every compositor stage runs before a frame is drawn: without it, under a virtual time budget, the
            # frame that fires the charts' visibility observers may never come, and the model-metrics page keeps
            # its loading spinners (about 2 loads in 3 on Chromium 156).
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--run-all-compositor-stages-before-draw", "--hide-scrollbars", f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip


def render(url: str, png: Path, expect: list[str], attempts: int = 3) -> tuple[str, Path]:
    """The visible text of `url` once its scripts ran (tags, scripts and styles removed, whitespace collapsed) and a
    SIZE screenshot of it at `png`, from one page load; loaded again, with a doubled time budget, while any of
    `expect` is missing (charts render from lazily fetched code, later on a busy machine). The PNG is written under a
    temporary name and renamed, so a crash leaves no half-written image."""
    tmp = png.with_name(f".{png.name}.tmp.png")
    for attempt in range(attempts):
        budget = BUDGET_MS * 2**attempt
        proc = _chromium(f"--virtual-time-budget={budget}", f"--window-size={SIZE[0]},{SIZE[1]}",
                         f"--screenshot={tmp}", "--dump-dom", url)  # fmt: skip
        if proc.returncode != 0 or "<html" not in proc.stdout or not tmp.is_file():
            raise RuntimeError(f"chromium on {url} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        dom = re.sub(r"<(script|style)\b.*?</\1>", " ", proc.stdout, flags=re.S)
        text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom))).strip()
        if all(t in text for t in expect):
            break
    tmp.replace(png)
    return text, png


def save_for_docs(img, path: Path, width: int) -> Path:
    """`img` (a Pillow image) scaled to `width` as an optimised PNG at `path` (temporary name, then renamed)."""
    small = img.convert("RGB").resize((width, round(img.height * width / img.width)), Image.LANCZOS)
    tmp = path.with_name(f".{path.name}.tmp.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    small.save(tmp, optimize=True)
    tmp.replace(path)
    return path
