"""A real `kernelrl serve` in a subprocess on 127.0.0.1, plus cheap tasks and candidates for the tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.evaluate import candidates as C

SRC = str(Path(__file__).resolve().parents[2] / "src")
ROOT = str(Path(__file__).resolve().parents[2])

TASK = {"id": "test/relu", "source": C.RELU_TASK}
# Candidates call a real C++ kernel (kernelrl.native; built once per cache), so no static policy on
# "uses a kernel" can reject them.
CHEAP = C.GOOD  # correct
WRONG = C.GOOD.replace("* s;", "* s + 0.5f;")  # builds and runs, wrong values


def sleepy(seconds: float) -> str:
    """A correct candidate whose first forward call busy-waits in C (to keep a worker busy)."""
    return f'''
import torch
import torch.nn as nn
from kernelrl.native import load_cpp

lib = load_cpp(r"""
#include <chrono>
void scaled_relu(const float* x, float* y, long n, float s) {{
    for (long i = 0; i < n; ++i) y[i] = (x[i] > 0 ? x[i] : 0) * s;
}}
void spin(double seconds) {{
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {{}}
}}
""", ["scaled_relu", "spin"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.slept = False

    def forward(self, x):
        if not self.slept:
            self.slept = True
            lib.spin({seconds})
        y = torch.empty_like(x)
        lib.scaled_relu(x.contiguous(), y, x.numel(), self.scale)
        return y
'''


FAST_CONFIG = {"measure_timing": False, "correctness_trials": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m kernelrl.cli serve ...` on a free port; `stop()` is SIGTERM, `kill()` is SIGKILL."""

    def __init__(self, db: Path, *args: str, token: str | None = None, port: int | None = None, env: dict | None = None) -> None:
        self.db = db
        self.args = list(args)
        self.token = token
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.log = db.with_suffix(f".{self.port}.log")

    def start(self, timeout: float = 90.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "kernelrl.cli", "serve", "--port", str(self.port), "--db", str(self.db), *self.args]
        if self.token:
            cmd += ["--token", self.token]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, ROOT]), **self.env}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError("server did not become healthy:\n" + self.log.read_text()[-3000:])

    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the whole process group (server and its evaluation workers)."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # leftover workers of this server only
            except (ProcessLookupError, PermissionError):
                pass


def children_running(parent: int, needle: str) -> list[int]:
    """Pids of direct children of `parent` whose command line contains `needle`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and needle in cmdline:
            found.append(int(entry.name))
    return found
