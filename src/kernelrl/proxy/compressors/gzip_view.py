"""gzip as a compressed view (deterministic: mtime=0, fixed level)."""

from __future__ import annotations

import gzip

from pydantic import Field

from kernelrl.proxy.compressors.base import COMPRESSORS, Compressor, CompressorOptions


class GzipOptions(CompressorOptions):
    level: int = Field(9, ge=0, le=9)


@COMPRESSORS.register("gzip")
class GzipCompressor(Compressor):
    """RFC 1952 gzip with a zero timestamp, so equal input gives equal output."""

    Options = GzipOptions
    options: GzipOptions

    def compress(self, data: bytes) -> bytes:
        return gzip.compress(data, compresslevel=self.options.level, mtime=0)

    def decompress(self, blob: bytes) -> bytes:
        return gzip.decompress(blob)
