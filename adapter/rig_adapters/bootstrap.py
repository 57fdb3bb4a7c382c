"""Imported by `rig_adapters.pth` at every interpreter start in the engine's environment."""

from rig_adapters.runtime import arm_from_env

arm_from_env()
