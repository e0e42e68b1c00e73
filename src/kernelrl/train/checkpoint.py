"""Checkpoints: safetensors weights, optimizer and LR-scheduler state, RNG states, data cursor and
trainer state, written to a temporary directory and renamed into place (atomic on one filesystem)."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(directory: str | Path, *, models: dict[str, Any], optimizers: dict[str, Any],
                    state: dict[str, Any]) -> Path:
    """Write ``directory`` atomically: ``<name>.safetensors`` per model, ``optim.pt`` (optimizers,
    schedulers, RNG states) and ``state.json``; an existing checkpoint there is replaced whole."""
    final = Path(directory)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, model in models.items():
        sd = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(sd, str(tmp / f"{name}.safetensors"))
    torch.save({"optimizers": {k: o.state_dict() for k, o in optimizers.items()}, "rng": rng_state()},
               tmp / "optim.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    old = final.with_name(final.name + ".old")
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)
    return final


def load_checkpoint(directory: str | Path, *, models: dict[str, Any], optimizers: dict[str, Any]) -> dict[str, Any]:
    """Restore models, optimizers/schedulers and RNG states; returns the saved trainer state."""
    d = Path(directory)
    for name, model in models.items():
        model.load_state_dict(load_file(str(d / f"{name}.safetensors")))
    blob = torch.load(d / "optim.pt", weights_only=False)
    for k, o in optimizers.items():
        o.load_state_dict(blob["optimizers"][k])
    set_rng_state(blob["rng"])
    return json.loads((d / "state.json").read_text())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoints/step_*`` directory of a run, if any."""
    ckpts = sorted((Path(run_dir) / "checkpoints").glob("step_[0-9]*"), key=lambda p: int(p.name.split("_")[1]))
    ckpts = [p for p in ckpts if not p.name.endswith((".tmp", ".old")) and (p / "state.json").is_file()]
    return ckpts[-1] if ckpts else None
