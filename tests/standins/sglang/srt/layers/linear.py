"""Stand-in for sglang.srt.layers.linear (0.5.23 signatures). LinearBase takes the layer's name as
`prefix` and keeps none of it, as stock SGLang's does (layers/linear.py:248-287); RowParallelLinear,
the shared expert's down_proj, passes its arguments up by position (:1601) and keeps none either;
MergedColumnParallelLinear is one of the few that store `self.prefix` (:708). Plain classes, no torch:
the stand-in images that rehearse the adapters (tests/boot/test_docker.py) import it without torch."""


class LinearBase:
    def __init__(self, input_size, output_size, skip_bias_add=False, params_dtype=None, quant_config=None, prefix=""):
        self.input_size, self.output_size = input_size, output_size


class RowParallelLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, input_is_parallel=True, skip_bias_add=False,
                 params_dtype=None, reduce_results=True, quant_config=None, prefix=""):
        super().__init__(input_size, output_size, skip_bias_add, params_dtype, quant_config, prefix)


class MergedColumnParallelLinear(LinearBase):
    def __init__(self, input_size, output_sizes, bias=True, gather_output=False, skip_bias_add=False,
                 params_dtype=None, quant_config=None, prefix=""):
        super().__init__(input_size, sum(output_sizes), skip_bias_add, params_dtype, quant_config, prefix=prefix)
        self.prefix = prefix
