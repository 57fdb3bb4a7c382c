"""Stand-in for sglang.srt.layers.quantization.fp8 (0.5.23 signatures)."""

from sglang.srt.layers.quantization.fp8_utils import dispatch_block_fp8_mxfp8_linear


class Fp8LinearMethod:
    def __init__(self):
        self.linear = dispatch_block_fp8_mxfp8_linear("cutlass")

    def _prepare_block_fp8_as_mxfp8(self, layer) -> None:
        layer.prepared = (tuple(layer.weight.shape), tuple(layer.weight_scale_inv.shape))
