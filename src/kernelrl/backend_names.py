"""The gym's backend names, importable without torch (CLIs, configs). `kernelrl.evaluate.backends` registers
one `Backend` class under each; a test keeps the two in step."""

BACKEND_NAMES = ("cpu", "triton", "cuda", "nki")
