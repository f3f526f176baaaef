"""Starters: suggested first questions that come with a bundled sample image.

Chainlit starters only send text, so each starter's message is recognised in
``on_message`` (:func:`sample_for`) and its sample image, from ``public/samples/``,
is attached as if the person had uploaded it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "public" / "samples"
"""Bundled sample images (public domain, from scikit-image; see tests/data/README.md)."""


@dataclass(frozen=True, slots=True)
class SampleStarter:
    """A starter: the button label, the message it sends and its sample image file."""

    label: str
    message: str
    image: str

    @property
    def path(self) -> Path:
        """The sample image on disk."""
        return SAMPLES / self.image

    @property
    def icon_url(self) -> str:
        """The sample image as Chainlit serves it (``/public/...``), for the button icon."""
        return f"/public/samples/{self.image}"


STARTERS: dict[str, tuple[SampleStarter, ...]] = {
    "en": (
        SampleStarter("Read this page", "Read this sample page and summarise it.", "page.png"),
        SampleStarter("What is in this photo?", "What is in this sample photo?", "rocket.jpg"),
    ),
    "zh": (
        SampleStarter("读这一页", "请阅读这页示例文档并总结。", "page.png"),
        SampleStarter("照片里有什么？", "这张示例照片里有什么？", "rocket.jpg"),
    ),
}


def starters_for(language: str | None) -> tuple[SampleStarter, ...]:
    """The starters in a UI language (``zh-CN`` -> Chinese, anything else English)."""
    return STARTERS["zh"] if (language or "").lower().startswith("zh") else STARTERS["en"]


def sample_for(text: str) -> Path | None:
    """The sample image of a starter whose message is exactly ``text`` (any language)."""
    wanted = text.strip()
    for starters in STARTERS.values():
        for starter in starters:
            if starter.message == wanted:
                return starter.path
    return None
