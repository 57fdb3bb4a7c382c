"""The adapter registry: one declaration per adapter, pure data.

Adding an adapter = one module under `rig_adapters/adapters/` + one row here. Nothing else
changes: the runtime arms rows, `rig adapters list` prints them, recipes are validated
against them and `rig adapters check` verifies their targets against pinned engine sources.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """One patched attribute: `module` is imported by the engine, `attribute` is a dotted path
    inside it, `params` the parameter names the adapter relies on (checked at arm time and
    statically by the drift check), `installer` the adapter-module function that patches it.

    `positional`: how many of `params`, in this order, the wrapper takes and forwards by
    position (None: all of them); the drift check holds the target's own parameter order and
    every call site's positional arguments to it. `callers`: dotted paths of the engine
    functions whose call (or functools.partial) of the target the adapter relies on; the drift
    check refuses when one of them no longer calls it. `engine`: the one engine this target lives
    in, for an adapter that serves several (None: every engine the adapter lists); the runtime
    reads the engine it runs in from RIG_ENGINE, which rig's drivers set."""

    module: str
    attribute: str
    installer: str
    params: tuple[str, ...] = ()
    positional: int | None = None
    callers: tuple[str, ...] = ()
    engine: str | None = None

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.attribute}"

    @property
    def by_position(self) -> tuple[str, ...]:
        return self.params if self.positional is None else self.params[: self.positional]


@dataclass(frozen=True)
class KernelEntry:
    """An entry point of a kernel library that the adapter's route ends in (called, not patched),
    read by the drift check from the version the engine wheel pins (`distribution` as spelled in
    its Requires-Dist). `accepts`: (parameter, value) pairs the adapter passes, each value must
    appear in that parameter's annotation (a Literal of backends). `raises`: exception classes
    (dotted, in the same library) the adapter's fallback catches; they must still exist."""

    distribution: str
    module: str
    attribute: str
    params: tuple[str, ...] = ()
    accepts: tuple[tuple[str, str], ...] = ()
    raises: tuple[str, ...] = ()

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.attribute}"


@dataclass(frozen=True)
class Lifecycle:
    works_around: str
    redundant_when: str
    last_gain: str
    measured_on: str


@dataclass(frozen=True)
class AdapterSpec:
    name: str
    summary: str
    gate: str
    settings: tuple[str, ...]
    engines: tuple[str, ...]
    targets: tuple[Target, ...]
    lifecycle: Lifecycle
    # Adapters whose wrappers this one must wrap (installed first on a shared target).
    after: tuple[str, ...] = ()
    # Recipes (by name) this adapter is meant for; empty = any recipe of a listed engine.
    recipes: tuple[str, ...] = ()
    test_only: bool = False
    # (distribution, module, attribute): when the engine's pinned copy of that distribution has
    # the attribute, upstream does the adapter's job and the adapter refuses as redundant.
    redundant_if: tuple[str, str, str] | None = None
    # Kernel-library entry points the adapter's route depends on (verified, never patched).
    kernels: tuple[KernelEntry, ...] = ()
    # A test instrument's known effect per generated token: (the manifest statistic that measured
    # it, milliseconds per unit of that statistic, "exact" (measured in place), "at least" (a lower
    # bound) or "about" (within the server's response to it: rig.compare.effects)). A comparison holds
    # its per-token delta against it.
    effect: tuple[str, float, str] | None = None
    # A gate that is also the adapter's amount (a delay's length): when on, a number in (low, high].
    # The adapter refuses any other value when it arms; rig refuses it in the recipe or arm first.
    gate_range: tuple[float, float] | None = None

    def gate_problem(self, value: str) -> str | None:
        """Why `value` of the gate can never arm this adapter (None: it can, or the gate is off)."""
        from rig_adapters.gates import gate_is_on

        if self.gate_range is None or not gate_is_on(value):
            return None
        low, high = self.gate_range
        try:
            number = float(value.strip())
        except ValueError:
            return f"{self.gate}={value!r} is not a number"
        if not low < number <= high:  # NaN fails too
            return f"{self.gate} must be a number in ({low:.12g}, {high:.12g}]"
        return None

    @property
    def module(self) -> str:
        return f"rig_adapters.adapters.{self.name}"

    def targets_for(self, engine: str | None) -> tuple[Target, ...]:
        """The targets to patch in `engine` (None: unknown, only engine-independent targets)."""
        return tuple(t for t in self.targets if t.engine is None or t.engine == engine)

    @property
    def engine_specific(self) -> bool:
        return any(t.engine is not None for t in self.targets)


_FP8_UTILS = "sglang.srt.layers.quantization.fp8_utils"
_FP8 = "sglang.srt.layers.quantization.fp8"
_LINEAR = "sglang.srt.layers.linear"
# Where SGLang binds the MXFP8 linear for block-FP8 weights served as MXFP8 (a partial per backend).
_MXFP8_DISPATCH = f"{_FP8_UTILS}.dispatch_block_fp8_mxfp8_linear"
_B12X_MM_MXFP8 = KernelEntry(
    distribution="flashinfer_python",
    module="flashinfer.gemm.gemm_base",
    attribute="mm_mxfp8",
    params=("a", "b", "a_descale", "b_descale", "out_dtype", "use_8x4_sf_layout", "backend"),
    accepts=(("backend", "b12x"),),
    raises=("flashinfer.utils.BackendSupportedError", "flashinfer.utils.LibraryError"),
)
_MXFP8_LINEAR_PARAMS = (
    "input",
    "weight",
    "weight_scale",
    "input_scale",
    "bias",
    "output_dtype",
    "backend",
    "pin_tactic",
)

# vLLM's per-step call in every worker process (TP ranks run it side by side, so a step is longer by
# a delay once), whichever model runner (V1 or V2) the worker built: token_delay's and gpu_delay's target.
_VLLM_STEP = Target("vllm.v1.worker.gpu_worker", "Worker.execute_model", "install_execute_model", ("self", "scheduler_output"),
                    positional=2, engine="vllm")

REGISTRY: tuple[AdapterSpec, ...] = (
    AdapterSpec(
        name="mxfp8_b12x",
        summary="route SGLang's MXFP8 dense linears to FlashInfer's b12x backend; shapes b12x rejects fall back",
        gate="RIG_MXFP8_B12X",
        settings=(),
        engines=("sglang",),
        targets=(
            Target(_FP8_UTILS, "flashinfer_mxfp8_blockscaled_linear", "install_linear", _MXFP8_LINEAR_PARAMS,
                   callers=(_MXFP8_DISPATCH,)),
        ),
        kernels=(_B12X_MM_MXFP8,),
        lifecycle=Lifecycle(
            works_around="SGLang selects only cutlass/cute-dsl for block-FP8-as-MXFP8 (fp8_utils.dispatch_block_fp8_mxfp8_linear); no b12x choice up to 0.5.23",
            redundant_when="SGLang offers a b12x MXFP8 dense backend of its own",
            last_gain="shared down_proj 58.00 -> 17.24 us/call with shared_pad_k (DeepSeek-V4.1-Flash TP4)",
            measured_on="RTX PRO 6000 Blackwell / DGX Spark (SM12x); cannot run on Hopper",
        ),
        recipes=("mia-tp4",),
    ),
    AdapterSpec(
        name="shared_pad_k",
        summary="shared-expert K padding: zero-pad down_proj K to the next multiple of 128 so b12x accepts it",
        gate="DSV41_SHARED_PAD_K",
        settings=("DSV41_SHARED_PAD_BUF_ROWS",),
        engines=("sglang",),
        targets=(
            Target(_LINEAR, "LinearBase.__init__", "install_names",
                   ("self", "input_size", "output_size", "skip_bias_add", "params_dtype", "quant_config", "prefix")),
            Target(_FP8, "Fp8LinearMethod._prepare_block_fp8_as_mxfp8", "install_prepare", ("self", "layer"),
                   callers=(f"{_FP8}.Fp8LinearMethod.process_weights_after_loading_block_quant",)),
            Target(_FP8_UTILS, "flashinfer_mxfp8_blockscaled_linear", "install_linear", _MXFP8_LINEAR_PARAMS,
                   callers=(_MXFP8_DISPATCH,)),
        ),
        lifecycle=Lifecycle(
            works_around="FlashInfer b12x mm_mxfp8 needs K % 128 == 0 (gemm_mm_mxfp8_cute_dsl); DeepSeek-V4.1 shared down_proj is K=576 at TP4",
            redundant_when="b12x mm_mxfp8 accepts K % 32 (then no shape is rejected and the adapter pads nothing)",
            last_gain="+1.14% prose c=1, +1.51% code c=1 (49.81 -> 50.59, 93.80 -> 95.22 tok/s)",
            measured_on="DeepSeek-V4.1-Flash TP4, SGLang dev-dsv41, DGX Spark (SM12x)",
        ),
        after=("mxfp8_b12x",),
        recipes=("mia-tp4",),
    ),
    AdapterSpec(
        name="w4a8_pad",
        summary="zero-pad B12X MoE expert shards to the smallest alignment the selected mode accepts",
        gate="RIG_W4A8_PAD",
        settings=(),
        engines=("vllm",),
        targets=(
            Target(
                "vllm.model_executor.layers.fused_moe.b12x",
                "B12xExperts._prepare_experts",
                "install_prepare",
                ("self", "w1", "w2", "activation", "params_dtype"),
                positional=1,  # the wrapper takes w1.. by keyword only, as vLLM declares them
                callers=("vllm.model_executor.layers.fused_moe.b12x.B12xExperts.process_weights_after_loading",),
            ),
        ),
        lifecycle=Lifecycle(
            works_around="older b12x w4a8_mx QMMA layout needs intermediate % 128 (GLM-5.2 TP6 shard 352 fails weight prep)",
            redundant_when="the installed b12x plans non-128 w4a8_mx shards natively (b12x 1.5.x: exact N64 repack and logical tails)",
            last_gain="unbootable -> boots; A8 decode c0 72.2 tok/s at 384 (~9% extra expert work)",
            measured_on="GLM-5.2 TP6/DCP1, vLLM fork image, RTX PRO 6000 Blackwell",
        ),
        recipes=("glm52-tp6",),
        redundant_if=("b12x", "b12x.moe.fused_moe._impl", "_dynamic_kernel_intermediate_size"),
    ),
    AdapterSpec(
        name="token_delay",
        summary="test-only: sleep a fixed time per model step (= per generated token) in transformers serve or vLLM",
        gate="RIG_TOKEN_DELAY_MS",
        settings=(),
        engines=("transformers", "vllm"),
        targets=(
            Target(
                "transformers.models.llama.modeling_llama",
                "LlamaForCausalLM.forward",
                "install_forward",
                ("self", "input_ids"),
                positional=1,  # the wrapper forwards *args and **kwargs untouched
                engine="transformers",
            ),
            _VLLM_STEP,
        ),
        lifecycle=Lifecycle(
            works_around="nothing: gives comparisons a known effect size on tiny-cpu",
            redundant_when="never (test instrument)",
            last_gain="n/a",
            measured_on="n/a",
        ),
        recipes=("tiny-cpu", "tiny-cpu-docker", "llama-h200"),
        test_only=True,
        effect=("injected_ms", 1.0, "about"),  # the server streams during the sleep, and wakes up slower after a long one
        gate_range=(0.0, 60_000.0),  # milliseconds per step
    ),
    AdapterSpec(
        name="gpu_delay",
        summary="test-only: a fixed GPU time per engine step (a spin kernel on the step's CUDA stream), what it adds measured on the GPU",
        gate="RIG_GPU_DELAY_US",
        settings=(),
        engines=("vllm", "sglang"),
        targets=(
            # The spin is stream-ordered before the step's kernels and graph replays, so
            # asynchronous scheduling cannot hide it.
            _VLLM_STEP,
            # SGLang's per-batch call in every TP scheduler process (overlap or not), from run_batch.
            Target("sglang.srt.managers.tp_worker", "TpModelWorker.forward_batch_generation", "install_forward_batch_generation",
                   ("self", "batch"), positional=2, callers=("sglang.srt.managers.scheduler.Scheduler.run_batch",), engine="sglang"),
        ),
        lifecycle=Lifecycle(
            works_around="nothing: gives comparisons on a GPU engine a known effect that host-side delays cannot be (async scheduling hides them)",
            redundant_when="never (test instrument)",
            last_gain="n/a",
            measured_on="n/a",
        ),
        after=("token_delay",),
        recipes=("llama-h200", "llama8b-h200", "llama8b-sglang-h200"),
        test_only=True,
        effect=("added_us", 0.001, "exact"),
        gate_range=(0.0, 1_000_000.0),  # microseconds of spin per step
    ),
    AdapterSpec(
        name="gemm_shapes",
        summary="test-only instrument: record every parameter shape the engine allocated per rank (rig audit --boot)",
        gate="RIG_GEMM_SHAPES",
        settings=(),
        engines=("vllm",),
        targets=(
            # Every loader but a few special ones (tensorizer, modelexpress) inherits this; dummy does.
            Target("vllm.model_executor.model_loader.base_loader", "BaseModelLoader.load_model", "install_load_model",
                   ("self", "vllm_config", "model_config"), positional=1),
        ),
        lifecycle=Lifecycle(
            works_around="nothing: reads the shapes the engine runs, for the shape audit",
            redundant_when="never (instrument)",
            last_gain="n/a",
            measured_on="n/a",
        ),
        recipes=("dsv3-shapes", "glm-shapes", "llama-h200"),
        test_only=True,
    ),
)

BY_NAME: dict[str, AdapterSpec] = {spec.name: spec for spec in REGISTRY}


def install_order(names: list[str] | tuple[str, ...]) -> list[AdapterSpec]:
    """Topological order over `after` (only among the given names), stable by registry order."""
    chosen = {name: BY_NAME[name] for name in names}
    ordered: list[AdapterSpec] = []
    placed: set[str] = set()
    while len(ordered) < len(chosen):
        progressed = False
        for spec in REGISTRY:
            if spec.name in chosen and spec.name not in placed:
                if all(dep in placed or dep not in chosen for dep in spec.after):
                    ordered.append(spec)
                    placed.add(spec.name)
                    progressed = True
        if not progressed:
            raise RuntimeError(f"adapter ordering has a cycle among {sorted(chosen)}")
    return ordered
