"""Model families as data: one entry per served model, the one place every module reads.

A :class:`ModelFamily` says how a model writes its reasoning (the text markers around it,
whether a reply begins inside it, whether the request writes the opening marker itself),
which vLLM reasoning parser separates it on the server, the image budget and the chat
defaults of its model card. Adding a family is one entry in :data:`FAMILIES`, its tests
and docs (docs/development.md, "Adding a model family"); ``tests/test_layers.py`` holds
that no other module names a family's markers.

Sources per entry: the model card (sampling defaults, budgets) and, for the parser, vLLM's
registry of reasoning parsers (``vllm/reasoning/__init__.py`` of the vLLM this project pins).
"""

from __future__ import annotations

from dataclasses import dataclass


def _english(msgid: str, /, **params: object) -> str:
    """A label's English text, where the catalogue cannot be loaded (below)."""
    return msgid.format(**params)


try:
    from backend.i18n import msg
except ModuleNotFoundError:  # vLLM's environment has no Babel: the reasoning parser plugin
    # (serving/kimi_reasoning.py) reads the markers there and shows no label.
    msg = _english  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class ReasoningMarkers:
    """The text a model writes around its reasoning, inside the reply's text.

    Attributes:
        open: the marker that opens the reasoning (``◁think▷``, ``<think>``).
        close: the marker that closes it; the answer follows.
    """

    open: str
    close: str

    def __post_init__(self) -> None:
        if not self.open or not self.close or self.open == self.close:
            raise ValueError(f"markers must be two different non-empty strings: {self}")

    @property
    def longest(self) -> int:
        """Characters of the longer marker."""
        return max(len(self.open), len(self.close))

    def within(self, text: str) -> bool:
        """True if ``text`` holds either marker."""
        return self.open in text or self.close in text


KIMI_MARKERS = ReasoningMarkers("◁think▷", "◁/think▷")
"""Kimi-VL's markers (Kimi-VL-A3B-Thinking-2506 model card, whose example
``extract_thinking_and_summary`` splits on them)."""

THINK_TAGS = ReasoningMarkers("<think>", "</think>")
"""The ``<think>`` tags of Qwen3's family (vLLM's ``vllm/parser/qwen3.py``,
``THINK_START``/``THINK_END``)."""


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """What the app must know about one served model.

    Attributes:
        served_name: the name vLLM serves it under (``--served-model-name``).
        hf_id: the Hugging Face repository id ``launch.sh`` passes to ``vllm serve``.
        label: a short name people see in the UI.
        markers: the text markers its reasoning is written between; a server without a
            reasoning parser sends them inside the answer text, and the app's splitter
            (:mod:`backend.reasoning`) takes them out.
        starts_in_reasoning: True if every reply begins inside the reasoning (a Thinking
            model): text before any marker is reasoning.
        opens_reply: True if a request writes the opening marker itself as the start of
            the reply (:attr:`reply_start`); False where the chat template already opens
            the reasoning in the generation prompt, or for a model that does not reason.
        reasoning_parser: the vLLM ``--reasoning-parser`` name that separates the
            reasoning on the server (into ``delta.reasoning``), or None.
        reasoning_parser_plugin: a parser file vLLM loads with
            ``--reasoning-parser-plugin`` (relative to the repository root) when vLLM has
            no parser of that name itself; None for a parser vLLM ships.
        temperature, top_p: recommended sampling (model card).
        max_tokens: default answer budget in tokens (capped by the max model length).
        in_token_limit: image budget in 14x14-pixel patches, the unit of the image
            pipeline (:mod:`backend.images`): an image is scaled down until
            ``(H / 14) * (W / 14) <= in_token_limit``.
        attention_heads: attention heads of the text model and of the vision tower (a
            tensor parallel size must divide both; ``serving/launcher.py``).
        dev_shaped: the dev model standing in for a Thinking model: with dev mode on, the
            app shapes its output into ``markers.open … markers.close answer`` with vLLM's
            structured outputs and reads it as a Thinking model's (backend.planning).
    """

    served_name: str
    hf_id: str
    label: str
    temperature: float
    max_tokens: int
    in_token_limit: int
    markers: ReasoningMarkers = KIMI_MARKERS
    starts_in_reasoning: bool = False
    opens_reply: bool = False
    reasoning_parser: str | None = None
    reasoning_parser_plugin: str | None = None
    top_p: float = 1.0
    attention_heads: tuple[int, int] = (16, 16)
    dev_shaped: bool = False

    @property
    def reply_start(self) -> str:
        """What a request writes of the reply itself (``ChatRequest.prefill``): the
        opening marker where :attr:`opens_reply`, else nothing.

        Kimi-VL-A3B-Thinking begins every reply with ``◁think▷``, and vLLM sends a
        stream's first token at once and the next ones ``stream_interval`` tokens a chunk
        (``vllm/v1/engine/output_processor.py``), so a reply that writes the marker itself
        would show its first words only a chunk later. Written by the request, the marker
        is not generated: the first token is a reasoning word, sent at once, and later
        chunks can carry several tokens. Kimi-VL's chat template renders an assistant
        message as written (docs/facts.md), so the model reads the same prompt it would
        have written; the reasoning parser (``serving/kimi_reasoning.py``) reads a
        prompt whose last assistant turn opened its reasoning as still reasoning.
        """
        return self.markers.open if self.opens_reply else ""


KIMI_VL_HEADS = (16, 16)
"""Kimi-VL-A3B (Thinking-2506 and Instruct): a DeepSeek-V2-style text model with 16 heads
(config.json ``text_config.num_attention_heads``) and the MoonViT vision tower with 16
(vLLM ``transformers_utils/configs/moonvit.py``)."""

KIMI_VL_PARSER = "kimi_vl"
"""Our vLLM reasoning parser for Kimi-VL's markers (vLLM has none for them)."""
KIMI_VL_PARSER_PLUGIN = "serving/kimi_reasoning_parser.py"

THINKING_2506 = ModelFamily(
    served_name="kimi-vl-thinking-2506",
    hf_id="moonshotai/Kimi-VL-A3B-Thinking-2506",
    label="Kimi-VL Thinking (2506)",
    markers=KIMI_MARKERS,
    starts_in_reasoning=True,
    opens_reply=True,
    reasoning_parser=KIMI_VL_PARSER,
    reasoning_parser_plugin=KIMI_VL_PARSER_PLUGIN,
    attention_heads=KIMI_VL_HEADS,
    # Model card of Kimi-VL-A3B-Thinking-2506: temperature 0.8, max_tokens up to
    # 32768; images up to about 1792x1792, i.e. (1792/14)**2 = 16384 patches.
    temperature=0.8,
    max_tokens=32768,
    in_token_limit=16384,
)

INSTRUCT = ModelFamily(
    served_name="kimi-vl",
    hf_id="moonshotai/Kimi-VL-A3B-Instruct",
    label="Kimi-VL Instruct",
    markers=KIMI_MARKERS,  # it writes none; split out all the same if it does
    attention_heads=KIMI_VL_HEADS,
    # Model card of Kimi-VL-A3B-Instruct: temperature 0.2; preprocessor_config.json
    # in_token_limit 4096.
    temperature=0.2,
    max_tokens=4096,
    in_token_limit=4096,
)

QWEN3_VL_THINKING = ModelFamily(
    served_name="qwen3-vl-8b-thinking",
    hf_id="Qwen/Qwen3-VL-8B-Thinking",
    label="Qwen3-VL Thinking (8B)",
    markers=THINK_TAGS,
    # Its chat template ends the generation prompt with "<think>\n": every reply begins
    # inside the reasoning and the request writes no marker (vLLM's qwen3 parser reads a
    # reply without the opening tag as reasoning up to "</think>").
    starts_in_reasoning=True,
    reasoning_parser="qwen3",
    # QwenLM/Qwen3-VL README, "Generation Hyperparameters", Thinking models: temperature
    # 0.6, top_p 0.95, out_seq_length 40960. Image budget: the README's image processor
    # budget of 1280 visual tokens of 32x32 pixels (longest_edge 1280*32*32 pixels), in
    # the pipeline's 14x14-pixel patches.
    # Text model 32 heads, vision tower 16 (transformers' Qwen3VLTextConfig and
    # Qwen3VLVisionConfig defaults, the 8B sizes: hidden 4096, 32 layers).
    attention_heads=(32, 16),
    temperature=0.6,
    top_p=0.95,
    max_tokens=40960,
    in_token_limit=1280 * 32 * 32 // (14 * 14),
)

DEV = ModelFamily(
    served_name="kimi-vl-dev",
    hf_id="(tiny random-weights model built by serving.devmodel)",
    label=msg("Dev model (random weights: answers are noise)"),  # shown: translated
    markers=KIMI_MARKERS,  # random weights write none; dev mode shapes them in
    reasoning_parser=KIMI_VL_PARSER,  # with launch.sh --dev and KIMI_DEV_THINKING
    reasoning_parser_plugin=KIMI_VL_PARSER_PLUGIN,
    dev_shaped=True,
    temperature=0.8,
    # Long enough to watch an answer stream and to press Stop (the tiny model
    # writes about 1,000 tokens a second on 2 CPU cores), without always cutting off.
    max_tokens=2048,
    in_token_limit=4096,
)

FAMILIES: dict[str, ModelFamily] = {
    family.served_name: family for family in (THINKING_2506, INSTRUCT, QWEN3_VL_THINKING, DEV)
}
"""Every known family by its served name."""


KNOWN_MARKERS: tuple[ReasoningMarkers, ...] = tuple(
    dict.fromkeys(family.markers for family in FAMILIES.values())
)
"""Every known family's markers, each once, in :data:`FAMILIES`' order."""


def family_for(served_name: str) -> ModelFamily:
    """The family of a served model name.

    Unknown names (a server started by someone else) get Instruct-like defaults
    under their own name: Kimi-VL's markers are still split out if the model writes them.
    """
    known = FAMILIES.get(served_name)
    if known is not None:
        return known
    return ModelFamily(
        served_name=served_name,
        hf_id=served_name,
        label=served_name,
        temperature=INSTRUCT.temperature,
        max_tokens=INSTRUCT.max_tokens,
        in_token_limit=INSTRUCT.in_token_limit,
    )
