"""kernelrl: reinforcement learning for language models that write correct and fast kernels."""

__version__ = "0.1.0"
