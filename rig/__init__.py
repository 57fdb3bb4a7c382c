"""rig: deployment recipes, adapters, load tests and comparisons for large MoE LLM serving."""

__version__ = "0.1.0"
