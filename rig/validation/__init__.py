"""Validation: every figure rig claims, declared once as data beside the evidence it is recomputed from.

validation/<claim>/claim.yaml names the claim, its figure, the hardware, engine and attention backend,
and one or more measurements, each with the command that produced it, its evidence file and the figures
as printed. `python -m rig.validation` recomputes every figure from the evidence with rig's own code
(the comparison's analysis, the run summary, the client bounds) and says, claim by claim, whether the
evidence still gives it; docs/validation.md is rendered from the same files.

Nothing else in rig imports this package: it reads what the rest of rig measured.
"""
