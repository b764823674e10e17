"""The cluster path on one machine: a single-node Slurm (`scripts/cluster/local-slurm.sh`) and a shared MLflow
tracking server (`mlflow server`, SQLite backend, artifact destination, optionally its basic-auth app), the same
components a cluster uses. Tests that need them are marked `cluster`; they skip, naming the reason, where the
daemons cannot start (not root, no Slurm and no apt-get or network to install it)."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_SLURM = ROOT / "scripts" / "cluster" / "local-slurm.sh"
MLFLOW = Path(sys.executable).with_name("mlflow")
ADMIN = ("admin", "atlas-admin-password")
RESEARCHER = ("researcher", "atlas-researcher-password")


@dataclass
class LocalSlurm:
    conf: Path
    dir: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": f"{os.environ['PATH']}:/usr/sbin"}

    def run(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def job_state_now(self, job_id: str) -> str:
        line = self.run("scontrol", "-o", "show", "job", job_id)
        return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)["JobState"]

    def job_state(self, job_id: str) -> str:
        """The job's final state as the controller and the job-completion log record it (they must agree)."""
        state = self.job_state_now(job_id)
        log = (self.dir / "log" / "jobcomp.log").read_text() if (self.dir / "log" / "jobcomp.log").is_file() else ""
        recorded = [
            dict(kv.split("=", 1) for kv in rec.split() if "=" in kv)["JobState"]
            for rec in log.splitlines()
            if f"JobId={job_id} " in rec
        ]
        assert recorded[-1:] == [state], f"job {job_id}: scontrol says {state}, jobcomp log {recorded}"
        return state


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory) -> LocalSlurm:
    """A single-node Slurm for the session, stopped at the end."""
    if not shutil.which("bash"):
        pytest.skip("local Slurm: no bash")
    where = tmp_path_factory.mktemp("slurm")
    proc = subprocess.run(["bash", str(LOCAL_SLURM), "start", str(where)], capture_output=True, text=True, timeout=600)
    if proc.returncode == 3:
        pytest.skip(f"local Slurm: {proc.stderr.strip().splitlines()[-1]}")
    if proc.returncode != 0:
        subprocess.run(["bash", str(LOCAL_SLURM), "stop", str(where)], timeout=60)
        raise RuntimeError(f"scripts/cluster/local-slurm.sh start failed:\n{proc.stderr}")
    slurm = LocalSlurm(conf=where / "slurm.conf", dir=where)
    yield slurm
    subprocess.run(["bash", str(LOCAL_SLURM), "stop", str(where)], timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TrackingServer:
    """`mlflow server` on 127.0.0.1: SQLite backend, served artifacts, the basic-auth app when `auth`."""

    dir: Path
    auth: bool
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_env(self, user: tuple[str, str] | None = RESEARCHER) -> dict[str, str]:
        """The environment of a job that logs to this server (as `user`; None: no credentials)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
        env["MLFLOW_TRACKING_URI"] = self.uri
        if self.auth and user is not None:
            env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"] = user
        return env

    def start(self) -> None:
        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            # the server's background job runner (a pool of worker processes) is for features this project
            # does not use; on 2 shared cores it only slows the start
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        args = [
            str(MLFLOW), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{self.dir / 'mlflow.db'}",
            "--artifacts-destination", str(self.dir / "mlartifacts"),
        ]  # fmt: skip
        if self.auth:
            ini = self.dir / "basic_auth.ini"
            ini.write_text(
                "[mlflow]\ndefault_permission = READ\n"
                f"database_uri = sqlite:///{self.dir / 'basic_auth.db'}\n"
                f"admin_username = {ADMIN[0]}\nadmin_password = {ADMIN[1]}\n"
                "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            )
            env |= {"MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_FLASK_SERVER_SECRET_KEY": "atlas-cluster-tests"}
            args += ["--app-name", "basic-auth"]
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115  (kept open by the server process)
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({self.proc.returncode}); see {self.dir / 'server.log'}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not up after 180 s; see {self.dir / 'server.log'}")

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def request(self, path: str, user: tuple[str, str] | None) -> int:
        """HTTP status of a GET on the REST API as `user` (None: unauthenticated)."""
        req = urllib.request.Request(f"{self.uri}{path}")
        if user is not None:
            req.add_header("Authorization", "Basic " + base64.b64encode(":".join(user).encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def add_user(self, user: tuple[str, str]) -> None:
        """Create `user` through the auth app's REST API, as the admin."""
        import json

        req = urllib.request.Request(
            f"{self.uri}/api/2.0/mlflow/users/create",
            data=json.dumps({"username": user[0], "password": user[1]}).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": "Basic " + base64.b64encode(":".join(ADMIN).encode()).decode(),
            },
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory) -> TrackingServer:
    """A tracking server with the basic-auth app on and a `researcher` account, for the module."""
    server = TrackingServer(tmp_path_factory.mktemp("mlflow-server"), auth=True)
    server.start()
    server.add_user(RESEARCHER)
    yield server
    server.stop()
