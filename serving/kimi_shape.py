"""Build a model directory with Kimi-VL-A3B-Thinking-2506's shape, for ``--load-format dummy``.

vLLM serves it through its own ``KimiVLForConditionalGeneration``
(``vllm/model_executor/models/kimi_vl.py``: MoonViT vision tower, a 2x2 patch
merger and projector, and a DeepSeek-V2-style MoE text model) with random
weights, so nothing is downloaded: the directory holds only configuration, a
tokenizer built here and our own processor (``serving/kimi_processing.py``,
copied in as remote code). It is the truest test of ``launch.sh``'s flags on a
GPU short of the real 32 GB checkpoint: the same architecture, memory and
kernels (MLA attention, fused MoE, the vision encoder), answers of noise.

Configuration values and where they come from:

- Text model (``text_config``): the Moonlight-16B-A3B configuration that
  Kimi-VL-A3B's language model is built on (the Kimi-VL model card names
  ``base_model: moonshotai/Moonlight-16B-A3B``): hidden 2048, 27 layers,
  **16 attention heads** (16 KV heads), MLA with kv_lora_rank 512, no q LoRA,
  qk_nope 128 + qk_rope 64, v_head 128; MoE with 64 routed experts, 2 shared,
  6 per token, moe_intermediate 1408, the first layer dense (intermediate 11264),
  sigmoid scoring, ``noaux_tc`` top-k, 1 group, routed_scaling_factor 2.446;
  vocabulary 163840, RMS-norm eps 1e-5. Kimi-VL's own values on top: context
  131072 (the model card's 128K) with rope_theta 800000.
- Vision tower (``vision_config``): MoonViT, patch 14, hidden 1152, 27 layers,
  16 heads, intermediate 4304, 64x64 initial position embedding, merge kernel
  2x2 (vLLM's ``MoonViTConfig`` defaults, adapted from the model repository's
  ``configuration_kimi_vl.py``).
- ``media_placeholder_token_id`` 163605 (vLLM's ``KimiVLConfig`` default, the
  id of ``<|media_pad|>``); BOS 163584, EOS 163585, ``<|im_end|>`` 163586 (the
  Moonlight configuration's eos_token_id), pad 163839.
- Image processor: patch 14, merge 2x2, ``in_token_limit`` 16384 for
  Thinking-2506 (images up to about 1792x1792, ``backend.settings``), 4096 for
  Instruct (its ``preprocessor_config.json``).

The other special tokens' ids (``<|im_user|>``, ``<|im_middle|>``, ...) are
our own choice inside Kimi's reserved range 163584..163839; the ordinary
vocabulary is a small byte-level BPE trained here, padded with unused entries so
that ids line up with the real vocabulary size.

Usage (in a Python with ``tokenizers`` and ``transformers``)::

    python -m serving.kimi_shape --out DIR [--hf-cache HUB_DIR] [--text-layers N]

``--hf-cache`` also installs the directory as the Hugging Face cache snapshot of
``moonshotai/Kimi-VL-A3B-Thinking-2506``, so that with ``HF_HUB_OFFLINE=1`` a
plain ``./launch.sh`` (which serves that id) serves this shape unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from backend.families import THINKING_2506

HF_ID = "moonshotai/Kimi-VL-A3B-Thinking-2506"
VOCAB_SIZE = 163840
FIRST_SPECIAL = 163584  # Kimi's 256 reserved ids: 163584 .. 163839
MEDIA_PAD_ID = 163605

# id -> token; ids not listed become <|reserved_token_N|>.
SPECIAL_TOKENS: dict[int, str] = {
    163584: "[BOS]",
    163585: "[EOS]",
    163586: "<|im_end|>",
    163587: "<|im_user|>",
    163588: "<|im_assistant|>",
    163594: "<|im_system|>",
    163601: "<|im_middle|>",
    163602: "<|media_start|>",
    163603: "<|media_content|>",
    163604: "<|media_end|>",
    MEDIA_PAD_ID: "<|media_pad|>",
    163839: "[PAD]",
}

# Kimi-VL's chat format (facts.md, "Kimi-VL"): <|im_user|>user<|im_middle|>...<|im_end|>;
# an image part is vLLM's placeholder string for this model (kimi_vl.py, get_placeholder_str).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- elif part['type'] in ['image', 'image_url'] -%}"
    "<|media_start|>image<|media_content|><|media_pad|><|media_end|>"
    "{%- endif -%}{%- endfor -%}{%- endif -%}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)

_MARKERS = THINKING_2506.markers
_CORPUS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A photo of a cat sitting on a wooden table next to a cup of coffee.",
    "What is in this picture? Describe the image in one short sentence.",
    "The rocket stands on the launch pad under a clear blue sky.",
    f"{_MARKERS.open} Let me look at the image carefully before answering. {_MARKERS.close}",
    "Numbers like 1, 2, 3, 42 and 2026 appear in text, as do dates and times.",
]


def text_config(layers: int = 27) -> dict[str, Any]:
    """The DeepSeek-V2-style MoE text model (values cited in the module docstring)."""
    return {
        "model_type": "deepseek_v3",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 2048,
        "intermediate_size": 11264,
        "moe_intermediate_size": 1408,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "n_shared_experts": 2,
        "n_routed_experts": 64,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 2.446,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072,
        "rope_theta": 800000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 163584,
        "eos_token_id": 163585,
        "pad_token_id": 163839,
        "torch_dtype": "bfloat16",
    }


def vision_config(layers: int = 27) -> dict[str, Any]:
    """MoonViT (values cited in the module docstring)."""
    return {
        "model_type": "moonvit",
        "patch_size": 14,
        "init_pos_emb_height": 64,
        "init_pos_emb_width": 64,
        "num_attention_heads": 16,
        "num_hidden_layers": layers,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "merge_kernel_size": [2, 2],
        "torch_dtype": "bfloat16",
    }


def model_config(text_layers: int = 27, vision_layers: int = 27) -> dict[str, Any]:
    """The top-level ``config.json``."""
    return {
        "architectures": ["KimiVLForConditionalGeneration"],
        "model_type": "kimi_vl",
        "torch_dtype": "bfloat16",
        "ignore_index": -100,
        "media_placeholder_token_id": MEDIA_PAD_ID,
        "pad_token_id": 0,
        "vocab_size": VOCAB_SIZE,
        "text_config": text_config(text_layers),
        "vision_config": vision_config(vision_layers),
    }


def special_token_table() -> list[tuple[int, str]]:
    """All 256 reserved ids with their token text, in id order."""
    return [
        (i, SPECIAL_TOKENS.get(i, f"<|reserved_token_{i - FIRST_SPECIAL}|>"))
        for i in range(FIRST_SPECIAL, VOCAB_SIZE)
    ]


def build_tokenizer(out: Path) -> None:
    """Train a byte-level BPE, pad its vocabulary to 163584 entries, add the specials.

    Written as ``tokenizer.json`` plus ``tokenizer_config.json`` (a transformers
    fast tokenizer, no remote code), with :data:`CHAT_TEMPLATE`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([f"{line} ({n})" for n in range(8) for line in _CORPUS], trainer)
    trained = json.loads(bpe.to_str())
    vocab: dict[str, int] = trained["model"]["vocab"]
    for i in range(len(vocab), FIRST_SPECIAL):  # never produced: no merge leads to them
        vocab[f"<unused_{i}>"] = i
    padded = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=[
                tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                for m in trained["model"]["merges"]
            ],
        )
    )
    padded.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    padded.decoder = decoders.ByteLevel()
    table = special_token_table()
    padded.add_special_tokens([token for _, token in table])
    for token_id, token in table:
        assert padded.token_to_id(token) == token_id, (token, padded.token_to_id(token), token_id)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=padded,
        bos_token="[BOS]",
        eos_token="[EOS]",
        pad_token="[PAD]",
        model_max_length=131072,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)


def build(
    out: Path, *, text_layers: int = 27, vision_layers: int = 27, in_token_limit: int = 16384
) -> None:
    """Write the whole model directory (no weights) into ``out`` (replaced)."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(
        json.dumps(model_config(text_layers, vision_layers), indent=2) + "\n"
    )
    (tmp / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 163584, "eos_token_id": [163585, 163586]}, indent=2) + "\n"
    )
    build_tokenizer(tmp)
    shutil.copy(Path(__file__).with_name("kimi_processing.py"), tmp / "kimi_processing.py")
    auto_map = {
        "AutoProcessor": "kimi_processing.KimiShapeProcessor",
        "AutoImageProcessor": "kimi_processing.KimiShapeImageProcessor",
    }
    image_processor = {
        "image_processor_type": "KimiShapeImageProcessor",
        "processor_class": "KimiShapeProcessor",
        "auto_map": auto_map,
        "patch_size": 14,
        "merge_kernel_size": [2, 2],
        "in_token_limit": in_token_limit,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    (tmp / "preprocessor_config.json").write_text(json.dumps(image_processor, indent=2) + "\n")
    (tmp / "processor_config.json").write_text(
        json.dumps({"processor_class": "KimiShapeProcessor", "auto_map": auto_map}, indent=2) + "\n"
    )
    # The tokenizer config must not send AutoProcessor's tokenizer lookup elsewhere.
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def install_in_hf_cache(model_dir: Path, hub: Path, repo_id: str = HF_ID) -> Path:
    """Copy ``model_dir`` in as the cached snapshot of ``repo_id`` under ``hub``.

    Layout of huggingface_hub's cache: ``models--ORG--NAME/refs/main`` holds a
    revision; ``snapshots/REVISION/`` holds the files. The revision here is a
    hash of the files, so a rebuild with other values gets a new snapshot.
    """
    digest = hashlib.sha1()
    for path in sorted(model_dir.iterdir()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    revision = digest.hexdigest()
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    shutil.rmtree(snapshot, ignore_errors=True)
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".cache/kimi-shape"))
    parser.add_argument("--text-layers", type=int, default=27, help="27 as the real model")
    parser.add_argument("--vision-layers", type=int, default=27, help="27 as the real model")
    parser.add_argument("--in-token-limit", type=int, default=16384)
    parser.add_argument("--hf-cache", type=Path, default=None, help="hub cache dir to install into")
    parser.add_argument("--repo-id", default=HF_ID)
    args = parser.parse_args(argv)
    build(
        args.out,
        text_layers=args.text_layers,
        vision_layers=args.vision_layers,
        in_token_limit=args.in_token_limit,
    )
    print(f"Kimi-VL-shaped model directory in {args.out}", file=sys.stderr)
    if args.hf_cache is not None:
        snap = install_in_hf_cache(args.out, args.hf_cache, args.repo_id)
        print(f"installed as {args.repo_id} in {snap}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
