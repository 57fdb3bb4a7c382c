"""Generate tiny-cpu's model offline and deterministically: a seeded random-weight Llama and a
byte-level BPE tokenizer trained on a fixed corpus. No hub access."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

# Bump when anything below changes what is generated: the directory name carries it.
GENERATOR_VERSION = 2
SEED = 20261129
VOCAB_SIZE = 512
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
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


def model_dir(cache_root: Path) -> Path:
    """Where the generated model lives; the name changes when the generator does."""
    digest = hashlib.sha256(f"{GENERATOR_VERSION}:{SEED}:{VOCAB_SIZE}".encode()).hexdigest()[:10]
    return cache_root / f"tiny-llama-{digest}"


def ensure_tiny_model(cache_root: Path) -> Path:
    """Build the model once; later calls return the existing directory."""
    return build_at(model_dir(cache_root))


def build_at(target: Path) -> Path:
    """Build the model into exactly `target` (the image build uses the recipe's model.path)."""
    if (target / "rig-tiny-model.json").exists():
        return target
    tmp = target.with_name(target.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    _build(tmp)
    (tmp / "rig-tiny-model.json").write_text(json.dumps({"generator_version": GENERATOR_VERSION, "seed": SEED}))
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)
    return target


def _build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=131072,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Wide logits so the end tokens, whose rows are zero (logit exactly 0), are never the
        # argmax and practically never sampled: every request runs to max_tokens.
        model.lm_head.weight.mul_(10.0)
        for token_id in (fast.eos_token_id, fast.convert_tokens_to_ids("<|end|>")):
            model.lm_head.weight[token_id].zero_()
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id
    ).save_pretrained(out)


def main(argv: list[str]) -> int:
    """`python3 tinymodel.py DIR`: the image build runs this file standalone (no rig installed)."""
    if len(argv) != 1:
        print("usage: python3 tinymodel.py DIR   (writes the generated tiny Llama into DIR)", file=sys.stderr)
        return 2
    target = build_at(Path(argv[0]))
    print(f"tiny model written to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
