"""Integer arithmetic coder (32-bit range, bit-wise renormalisation with underflow handling).

Symbols are coded against cumulative frequency tables `cum` with `cum[0] == 0`, `cum[s+1] - cum[s]`
the frequency of symbol s and `cum[-1]` the total (at most 2**16 here). The encoder can report the
exact length its output would have if it stopped now, which is what equal-information windows need.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PRECISION = 32
FULL = (1 << PRECISION) - 1
HALF = 1 << (PRECISION - 1)
QUARTER = 1 << (PRECISION - 2)
MAX_TOTAL = 1 << 16


class ArithmeticEncoder:
    """Encodes symbols one at a time into a list of bits."""

    def __init__(self) -> None:
        self.low = 0
        self.high = FULL
        self.pending = 0
        self.bits: list[int] = []

    def _emit(self, bit: int) -> None:
        self.bits.append(bit)
        if self.pending:
            self.bits.extend([1 - bit] * self.pending)
            self.pending = 0

    def encode(self, cum_lo: int, cum_hi: int, total: int) -> None:
        """Narrow the interval to the symbol's share [cum_lo, cum_hi) of `total`."""
        if not 0 <= cum_lo < cum_hi <= total <= MAX_TOTAL:
            raise ValueError(f"bad frequency interval [{cum_lo}, {cum_hi}) of {total}")
        span = self.high - self.low + 1
        self.high = self.low + span * cum_hi // total - 1
        self.low = self.low + span * cum_lo // total
        while True:
            if self.high < HALF:
                self._emit(0)
            elif self.low >= HALF:
                self._emit(1)
                self.low -= HALF
                self.high -= HALF
            elif self.low >= QUARTER and self.high < HALF + QUARTER:
                self.pending += 1
                self.low -= QUARTER
                self.high -= QUARTER
            else:
                break
            self.low = 2 * self.low
            self.high = 2 * self.high + 1

    def length_if_finished(self) -> int:
        """Number of bits `finish()` would return now."""
        return len(self.bits) + self.pending + 2

    def state(self) -> tuple[int, int, int, int]:
        """A snapshot that `restore` can roll back to."""
        return self.low, self.high, self.pending, len(self.bits)

    def restore(self, snap: tuple[int, int, int, int]) -> None:
        self.low, self.high, self.pending, n = snap
        del self.bits[n:]

    def finish(self) -> list[int]:
        """Terminate: two more bits (plus pending) pin a value inside the final interval.

        The decoder reads zeros past the end, so the output may be zero-padded freely.
        """
        self.pending += 1
        self._emit(0 if self.low < QUARTER else 1)
        return self.bits


class ArithmeticDecoder:
    """Decodes symbols from a bit sequence (reads zeros past its end)."""

    def __init__(self, bits: Sequence[int]) -> None:
        self.bits = bits
        self.pos = 0
        self.low = 0
        self.high = FULL
        self.value = 0
        for _ in range(PRECISION):
            self.value = (self.value << 1) | self._next_bit()

    def _next_bit(self) -> int:
        bit = self.bits[self.pos] if self.pos < len(self.bits) else 0
        self.pos += 1
        return bit

    def decode(self, cum: np.ndarray) -> int:
        """Decode one symbol given its cumulative table `cum` [n_symbols + 1] (int64)."""
        total = int(cum[-1])
        span = self.high - self.low + 1
        scaled = ((self.value - self.low + 1) * total - 1) // span
        sym = int(np.searchsorted(cum, scaled, side="right")) - 1
        cum_lo, cum_hi = int(cum[sym]), int(cum[sym + 1])
        self.high = self.low + span * cum_hi // total - 1
        self.low = self.low + span * cum_lo // total
        while True:
            if self.high < HALF:
                pass
            elif self.low >= HALF:
                self.value -= HALF
                self.low -= HALF
                self.high -= HALF
            elif self.low >= QUARTER and self.high < HALF + QUARTER:
                self.value -= QUARTER
                self.low -= QUARTER
                self.high -= QUARTER
            else:
                break
            self.low = 2 * self.low
            self.high = 2 * self.high + 1
            self.value = (self.value << 1) | self._next_bit()
        return sym


def bits_to_bytes(bits: Sequence[int]) -> bytes:
    """Pack bits (MSB first) into bytes; the last byte is zero-padded."""
    arr = np.zeros(-(-len(bits) // 8) * 8, dtype=np.uint8)
    arr[: len(bits)] = bits
    return np.packbits(arr).tobytes()


def bytes_to_bits(data: bytes) -> list[int]:
    """Unpack bytes into bits, MSB first."""
    return np.unpackbits(np.frombuffer(data, dtype=np.uint8)).tolist()
