"""Shape audit: every GEMM a recipe runs per rank, checked against backend constraints kept as data."""
