"""Bridges to outside RL frameworks: verl (reward function, estimator and loss registration) and TRL.

Each module imports its framework lazily, so kernelrl works without them installed.
"""
