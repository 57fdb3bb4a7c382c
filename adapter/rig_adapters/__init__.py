"""rig_adapters: gated runtime patches that put slow shapes back on fast kernels.

Every adapter is one module under `rig_adapters.adapters` plus one row in
`rig_adapters.registry.REGISTRY`. Nothing here runs unless an adapter's gate is set.
"""

__version__ = "0.1.0"
