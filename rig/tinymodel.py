"""Generate rig's models offline and deterministically: a byte-level BPE tokenizer trained on a
fixed corpus, and a preset from rig/data/generated_models.json (tiny-cpu's 100k-parameter Llama,
the H200 recipes' Llama and MoE shapes): seeded random weights, or config only for an engine
that draws its own (vLLM --load-format dummy). No hub access. Runs standalone in image builds
(`python3 tinymodel.py --preset NAME DIR`), next to a copy of the preset file."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

# Bump when anything below changes what is generated: the directory name carries it.
GENERATOR_VERSION = 5
SEED = 20261129
DEFAULT_PRESET = "tiny-llama"
_HERE = Path(__file__).resolve().parent
# In the repository the presets are rig/data/...; an image build copies both files to one folder.
PRESET_FILES = (_HERE / "data" / "generated_models.json", _HERE / "generated_models.json")
VOCAB_SIZE = 512
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|unk|>"]
# Only printable ASCII (plus newline and tab) becomes a token: a byte-level vocabulary would hold
# lone UTF-8 continuation bytes, and a random model that emits them makes servers hold the text
# back until a character completes (vLLM's detokenizer does), so streams arrive in bursts and
# per-token timing is lost. Every token here is complete text; anything else encodes as <|unk|>.
TEXT_BYTES = bytes([*range(32, 127), 9, 10])
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Large mixture-of-experts models are served with tensor parallelism across many GPUs.",
    "def matmul(a, b):\n    return [[sum(x * y for x, y in zip(row, col)) for col in zip(*b)] for row in a]\n",
    "Tokens per second at concurrency one decide how a chat feels; aggregate throughput decides the bill.",
    "Zero-padding the contraction dimension from 576 to 640 puts the GEMM back on a fast kernel.",
    "for i in range(10):\n    print(i, i * i)\n",
    "Once upon a time a small model lived inside a test suite and answered every prompt with noise.",
    "SELECT name, count(*) FROM requests WHERE status = 200 GROUP BY name ORDER BY 2 DESC;",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?()[]{}<>+-*/=_'\"#%&@",
]


def presets() -> dict[str, dict[str, Any]]:
    for path in PRESET_FILES:
        if path.exists():
            return {name: value for name, value in json.loads(path.read_text()).items() if not name.startswith("_")}
    raise FileNotFoundError(f"no generated_models.json next to {__file__}")


def preset_names() -> list[str]:
    return sorted(presets())


def model_dir(cache_root: Path, preset: str = DEFAULT_PRESET) -> Path:
    """Where the generated model lives; the name changes when the generator or the preset does."""
    spec = json.dumps(presets()[preset], sort_keys=True)
    digest = hashlib.sha256(f"{GENERATOR_VERSION}:{SEED}:{VOCAB_SIZE}:{spec}".encode()).hexdigest()[:10]
    return cache_root / f"{preset}-{digest}"


def ensure_tiny_model(cache_root: Path, preset: str = DEFAULT_PRESET) -> Path:
    """Build the model once; later calls return the existing directory."""
    return build_at(model_dir(cache_root, preset), preset)


def build_at(target: Path, preset: str = DEFAULT_PRESET) -> Path:
    """Build the model into exactly `target` (the image build uses the recipe's model.path). Built in
    a private staging directory and renamed into place, so two processes building the same model at
    once (parallel tests, two rig commands) never see or leave a half-written one."""
    import shutil
    import tempfile

    if (target / "rig-tiny-model.json").exists():
        return target
    spec = presets()[preset]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _build(staging, spec)
        (staging / "rig-tiny-model.json").write_text(json.dumps({"generator_version": GENERATOR_VERSION, "seed": SEED,
                                                                  "preset": preset, "weights": spec["weights"]}))
        if target.exists() and not (target / "rig-tiny-model.json").exists():
            shutil.rmtree(target)  # an unfinished directory from an older generator
        try:
            staging.rename(target)
        except OSError:
            if not (target / "rig-tiny-model.json").exists():  # not another process's finished model
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _build(out: Path, spec: dict[str, Any]) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<|unk|>"))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = [byte_level.pre_tokenize_str(chr(b))[0][0] for b in TEXT_BYTES]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    # model_max_length is the model's own context: without it transformers reads int(1e30), and
    # SGLang 0.5.17's /v1/tokenize returns that as max_model_len, which its JSON encoder (orjson)
    # refuses ("Integer exceeds 64-bit range": a 500 on every call).
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=spec["config"]["max_position_embeddings"],
    )
    fast.save_pretrained(out)

    fields = dict(spec["config"])
    model_type = fields.pop("model_type")
    dtype = fields.pop("dtype")
    config = AutoConfig.for_model(model_type, vocab_size=len(fast), bos_token_id=fast.bos_token_id,
                                  eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, dtype=dtype, **fields)
    if spec["weights"] == "dummy":  # the engine draws the weights (vLLM --load-format dummy): config and tokenizer only
        config.save_pretrained(out)
    else:
        torch.manual_seed(SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        with torch.no_grad():
            # Wide logits so the special tokens (end tokens among them), whose rows are zero (logit
            # exactly 0), are never the argmax and practically never sampled: every request runs
            # to max_tokens, and every token streams as text.
            model.lm_head.weight.mul_(10.0)
            for token in SPECIAL_TOKENS:
                model.lm_head.weight[fast.convert_tokens_to_ids(token)].zero_()
        model.to(getattr(torch, dtype)).save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id
    ).save_pretrained(out)


def main(argv: list[str]) -> int:
    """`python3 tinymodel.py [--preset NAME] DIR`: the image build runs this file standalone (no rig installed)."""
    parser = argparse.ArgumentParser(prog="tinymodel.py", description="write a generated model into DIR")
    parser.add_argument("--preset", default=DEFAULT_PRESET, choices=preset_names())
    parser.add_argument("dir")
    args = parser.parse_args(argv)
    target = build_at(Path(args.dir), args.preset)
    print(f"{args.preset} written to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
