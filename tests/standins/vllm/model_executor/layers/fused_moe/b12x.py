"""Stand-in for vllm.model_executor.layers.fused_moe.b12x (0.33.0 signatures)."""


class _Slot:
    def __init__(self, scale):
        self.scale = scale


class _QuantConfig:
    def __init__(self, w1_scale, w2_scale):
        self._w1, self._w2 = _Slot(w1_scale), _Slot(w2_scale)


class B12xExperts:
    def __init__(self, quant_mode, w1_scale, w2_scale, w13_layout="gate_up"):
        self._quant_mode, self._w13_layout = quant_mode, w13_layout
        self.quant_config = _QuantConfig(w1_scale, w2_scale)

    def _prepare_experts(self, *, w1, w2, activation, params_dtype):
        return {"w1": w1, "w2": w2, "w1_scale": self.quant_config._w1.scale, "w2_scale": self.quant_config._w2.scale,
                "intermediate_size": int(w2.shape[2]) * 2}
