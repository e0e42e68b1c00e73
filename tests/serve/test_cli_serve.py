"""`kernelrl serve` refuses to bind beyond loopback without a token."""

from __future__ import annotations

import pytest

from kernelrl.cli import main
from kernelrl.serve.server import ServeConfigError, ServeOptions, is_loopback


def test_public_bind_without_token_is_refused(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELRL_SERVE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--db", ":memory:"]) == 2
    assert "binding beyond loopback requires an auth token" in capsys.readouterr().err


def test_loopback_detection_and_token_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.5.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("example.org")
    monkeypatch.delenv("KERNELRL_SERVE_TOKEN", raising=False)
    with pytest.raises(ServeConfigError):
        ServeOptions(host="0.0.0.0").check()
    monkeypatch.setenv("KERNELRL_SERVE_TOKEN", "secret")
    ServeOptions(host="0.0.0.0").check()
