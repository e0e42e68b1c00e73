"""Hardware limits of one NeuronCore-v2 and the compile-style error the interpreter raises.

Sources: the tile-size constants are those of `nki.language.tile_size` (NKI API docs). SBUF and PSUM
sizes are from the "Trainium/Inferentia2 Architecture Guide for NKI": SBUF 24 MiB over 128 partitions
(192 KiB per partition), PSUM 2 MiB over 128 partitions (16 KiB per partition) in 8 banks of 2 KiB.
The real compiler reserves part of SBUF for itself; the interpreter allows the full 192 KiB.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

PMAX = 128  # nl.tile_size.pmax: partitions of an SBUF/PSUM tile
PSUM_FMAX = 512  # nl.tile_size.psum_fmax: fp32 elements per partition of one PSUM tile (one bank)
GEMM_STATIONARY_FMAX = 128  # nl.tile_size.gemm_stationary_fmax
GEMM_MOVING_FMAX = 512  # nl.tile_size.gemm_moving_fmax
SBUF_BYTES_PER_PARTITION = 192 * 1024  # 24 MiB / 128 partitions (NeuronCore-v2)
PSUM_BANK_BYTES = 2 * 1024  # per partition
PSUM_BANKS = 8  # 16 KiB per partition

_PACKAGE_DIR = str(Path(__file__).resolve().parent)


def candidate_frame() -> FrameType | None:
    """The innermost stack frame outside this package: the candidate's line that called the NKI API."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_PACKAGE_DIR) and "<frozen" not in name:
            return frame
        frame = frame.f_back
    return None


class NkiCompileError(Exception):
    """A kernel broke an NKI rule. `code` names the rule, `lineno`/`filename` locate the candidate line."""

    def __init__(self, code: str, message: str, lineno: int | None = None, filename: str | None = None) -> None:
        self.code, self.message, self.lineno, self.filename = code, message, lineno, filename
        where = f"{filename}:{lineno}" if lineno is not None else "<unknown>"
        super().__init__(f"{where}: error [{code}]: {message}")


def fail(code: str, message: str) -> NkiCompileError:
    """Build an NkiCompileError located at the candidate's calling line (raise the result)."""
    frame = candidate_frame()
    if frame is None:
        return NkiCompileError(code, message)
    return NkiCompileError(code, message, frame.f_lineno, frame.f_code.co_filename)
