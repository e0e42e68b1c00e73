"""Importing this module registers kernelrl's estimators and losses in verl (`register_with_verl`).

For verl's own import hooks, so every process (driver and Ray workers) has them:
``VERL_USE_EXTERNAL_MODULES=kernelrl.integrations.verl_plugin`` (read when `verl` is imported) or
``actor_rollout_ref.model.external_lib=kernelrl.integrations.verl_plugin`` (read where the model config is built).
"""

from __future__ import annotations

from kernelrl.integrations.verl_registration import register_with_verl

#: what `register_with_verl` reported: name -> "registered" or "skipped: <why>".
REPORT = register_with_verl()
