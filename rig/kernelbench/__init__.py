"""GEMM micro-benchmarks, the method that measured the K=576 fix: weight copies so L2 is cold,
one CUDA graph per variant, interleaved rounds, medians with spread, a bitwise losslessness
check and the control row (padding on the same backend)."""
