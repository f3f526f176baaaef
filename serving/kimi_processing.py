"""Image processor and processor for the Kimi-VL-shaped test model (our own code).

``serving.kimi_shape`` copies this file into the model directory it builds and
names it in ``auto_map``; vLLM then loads it with ``AutoProcessor`` and
``--trust-remote-code``, the way it loads the model repository's own remote code.
It must therefore be self-contained: it imports only numpy, PIL and transformers.

What it implements is exactly what vLLM's ``kimi_vl.py`` asks of the processor
(vllm-project/vllm, ``vllm/model_executor/models/kimi_vl.py``,
``KimiVLProcessingInfo.get_num_image_tokens`` and the dummy-input builder):

- ``processor.image_token``: the placeholder text, ``<|media_pad|>``;
- ``processor.image_processor.patch_size`` (14), ``.merge_kernel_size`` ((2, 2))
  and ``.in_token_limit``;
- images scaled down when ``(W // 14) * (H // 14) > in_token_limit`` by
  ``sqrt(in_token_limit / ((W // 14) * (H // 14)))`` (``int()`` of each side),
  then padded up to multiples of ``14 * 2`` = 28 px;
- outputs ``pixel_values`` of shape ``(patches, 3, 14, 14)`` (all images' patches
  concatenated, row-major per image) and ``image_grid_hws`` ``(images, 2)`` in
  patches; each ``<|media_pad|>`` in the text becomes ``(gh / 2) * (gw / 2)``
  copies, the count vLLM computes for the same image.

Normalisation uses mean = std = 0.5 per channel (the model repository's
``preprocessor_config.json``); with random weights it only has to be plausible.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np
from PIL import Image
from transformers import BatchFeature
from transformers.image_processing_utils import ImageProcessingMixin
from transformers.processing_utils import ProcessorMixin

IMAGE_TOKEN = "<|media_pad|>"


def scaled_size(width: int, height: int, patch_size: int, in_token_limit: int) -> tuple[int, int]:
    """The size an image is resized to before padding (vLLM's formula, see module doc)."""
    patches = (width // patch_size) * (height // patch_size)
    if patches > in_token_limit:
        scale = math.sqrt(in_token_limit / patches)
        width, height = int(width * scale), int(height * scale)
    return max(width, 1), max(height, 1)


class KimiShapeImageKwargs(TypedDict, total=False):
    """Keyword arguments ``from_pretrained`` may pass on (transformers 5 reads ``valid_kwargs``)."""

    patch_size: int
    merge_kernel_size: list[int]
    in_token_limit: int


class KimiShapeImageProcessor(ImageProcessingMixin):  # type: ignore[misc]
    """Resize to the patch budget, pad to 28 px multiples, cut into 14 px patches."""

    valid_kwargs = KimiShapeImageKwargs
    model_input_names = ["pixel_values", "image_grid_hws"]  # noqa: RUF012

    def __init__(
        self,
        patch_size: int = 14,
        merge_kernel_size: list[int] | tuple[int, int] = (2, 2),
        in_token_limit: int = 16384,
        image_mean: list[float] | None = None,
        image_std: list[float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.merge_kernel_size = tuple(merge_kernel_size)
        self.in_token_limit = in_token_limit
        self.image_mean = image_mean or [0.5, 0.5, 0.5]
        self.image_std = image_std or [0.5, 0.5, 0.5]

    def _one(self, image: Image.Image) -> tuple[np.ndarray, tuple[int, int]]:
        """Patches ``(gh * gw, 3, p, p)`` and grid ``(gh, gw)`` of one image."""
        p = self.patch_size
        kh, kw = self.merge_kernel_size
        image = image.convert("RGB")
        w, h = scaled_size(image.width, image.height, p, self.in_token_limit)
        if (w, h) != image.size:
            image = image.resize((w, h), Image.Resampling.BICUBIC)
        pad_w = (kw * p - w % (kw * p)) % (kw * p)
        pad_h = (kh * p - h % (kh * p)) % (kh * p)
        array: np.ndarray[Any, Any] = np.asarray(image, dtype=np.float32) / 255.0
        array = np.pad(array, ((0, pad_h), (0, pad_w), (0, 0)))
        normalized = (array - np.asarray(self.image_mean, np.float32)) / np.asarray(
            self.image_std, np.float32
        )
        gh, gw = (h + pad_h) // p, (w + pad_w) // p
        patches = normalized.reshape(gh, p, gw, p, 3).transpose(0, 2, 4, 1, 3).reshape(-1, 3, p, p)
        return patches, (gh, gw)

    def __call__(self, images: Any, return_tensors: str | None = None, **_: Any) -> BatchFeature:
        """Process one image or a list of images (PIL or arrays)."""
        if not isinstance(images, list | tuple):
            images = [images]
        all_patches, grids = [], []
        for image in images:
            if not isinstance(image, Image.Image):
                image = Image.fromarray(np.asarray(image))
            patches, grid = self._one(image)
            all_patches.append(patches)
            grids.append(grid)
        data = {
            "pixel_values": np.concatenate(all_patches)
            if all_patches
            else np.zeros((0, 3, 14, 14)),
            "image_grid_hws": np.asarray(grids, dtype=np.int64).reshape(-1, 2),
        }
        return BatchFeature(data=data, tensor_type=return_tensors)

    preprocess = __call__


class KimiShapeProcessor(ProcessorMixin):  # type: ignore[misc]
    """Tokenizer plus :class:`KimiShapeImageProcessor`; expands each image placeholder."""

    def __init__(
        self,
        image_processor: Any = None,
        tokenizer: Any = None,
        chat_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(image_processor, tokenizer, chat_template=chat_template)
        self.image_token = IMAGE_TOKEN

    def __call__(
        self,
        images: Any = None,
        text: str | list[str] | None = None,
        return_tensors: str | None = None,
        **kwargs: Any,
    ) -> BatchFeature:
        """Tokenize ``text`` with each ``<|media_pad|>`` expanded to its image's tokens."""
        data: dict[str, Any] = {}
        counts: list[int] = []
        if images is not None:
            image_inputs = self.image_processor(images, return_tensors=None)
            kh, kw = self.image_processor.merge_kernel_size
            counts = [
                (int(gh) // kh) * (int(gw) // kw) for gh, gw in image_inputs["image_grid_hws"]
            ]
            data.update(image_inputs)
        if text is not None:
            texts = [text] if isinstance(text, str) else list(text)
            queue = iter(counts)
            expanded = []
            for t in texts:
                parts = t.split(IMAGE_TOKEN)
                out = parts[0]
                for part in parts[1:]:
                    out += IMAGE_TOKEN * next(queue, 1) + part
                expanded.append(out)
            tok_kwargs = {
                k: v
                for k, v in kwargs.items()
                if k in ("padding", "truncation", "add_special_tokens")
            }
            data.update(self.tokenizer(expanded, **tok_kwargs))
        return BatchFeature(data=data, tensor_type=return_tensors)

    @property
    def model_input_names(self) -> list[str]:
        """Names of what this processor returns."""
        return ["input_ids", "attention_mask", "pixel_values", "image_grid_hws"]
