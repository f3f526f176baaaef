"""Starters: suggested first questions that come with a bundled sample image.

Chainlit starters only send text, so each starter's message is recognised in
``on_message`` (:func:`sample_for`) and its sample image, from ``public/samples/``,
is attached as if the person had uploaded it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "public" / "samples"
"""Bundled sample images (public domain, from scikit-image, and a settings page rendered
for this project; see tests/data/README.md)."""


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
        SampleStarter(
            "Where should I click?",
            "Where should I click to turn on dark mode? Answer with "
            "pyautogui.click(x=..., y=...), coordinates from 0 to 1 of the screenshot.",
            "settings.png",
        ),
        SampleStarter(
            "Find the spoon",
            "Find the spoon in this photo. Give its box as JSON, "
            '{"bbox_2d": [x1, y1, x2, y2], "label": "spoon"}, coordinates from 0 to 1.',
            "coffee.png",
        ),
    ),
    "zh": (
        SampleStarter("读这一页", "请阅读这页示例文档并总结。", "page.png"),
        SampleStarter("照片里有什么？", "这张示例照片里有什么？", "rocket.jpg"),
        SampleStarter(
            "该点哪里？",
            "要打开深色模式，我该点击哪里？请用 pyautogui.click(x=..., y=...) 回答，"
            "坐标取截图宽高的 0 到 1。",
            "settings.png",
        ),
        SampleStarter(
            "找到勺子",
            "在这张照片里找到勺子。请用 JSON 给出它的框："
            '{"bbox_2d": [x1, y1, x2, y2], "label": "勺子"}，坐标取 0 到 1。',
            "coffee.png",
        ),
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
