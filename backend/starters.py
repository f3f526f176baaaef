"""Starters: suggested first questions that come with a bundled sample image.

Chainlit starters only send text, so each starter's message is recognised in
``on_message`` (:func:`sample_for`) and its sample image, from ``public/samples/``,
is attached as if the person had uploaded it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from backend.i18n import LOCALES, msg, translator, translator_for

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


STARTERS: tuple[SampleStarter, ...] = (
    SampleStarter(
        msg("Read this page"), msg("Read this sample page and summarise it."), "page.png"
    ),
    SampleStarter(
        msg("What is in this photo?"), msg("What is in this sample photo?"), "rocket.jpg"
    ),
    SampleStarter(
        msg("Where should I click?"),
        msg(
            "Where should I click to turn on dark mode? Answer with "
            "pyautogui.click(x=..., y=...), coordinates from 0 to 1 of the screenshot."
        ),
        "settings.png",
    ),
    SampleStarter(
        msg("Find the spoon"),
        msg(
            "Find the spoon in this photo. Give its box as JSON, "
            '{{"bbox_2d": [x1, y1, x2, y2], "label": "spoon"}}, coordinates from 0 to 1.'
        ),
        "coffee.png",
    ),
)
"""The starters, in English (msgids of the catalogue: :func:`starters_for` translates)."""


def starters_for(language: str | None) -> tuple[SampleStarter, ...]:
    """The starters in a browser language (``zh-CN`` -> Chinese, anything else English;
    :func:`backend.i18n.locale_for`)."""
    tr = translator_for(language)
    return tuple(replace(s, label=tr(s.label), message=tr(s.message)) for s in STARTERS)


def sample_for(text: str) -> Path | None:
    """The sample image of a starter whose message is exactly ``text`` (in any language)."""
    return _samples_by_message().get(text.strip())


@cache
def _samples_by_message() -> dict[str, Path]:
    """Every starter's message, in every language, to its sample image (made once: every
    question is looked up here before its request)."""
    return {
        translator(locale)(starter.message): starter.path
        for locale in LOCALES
        for starter in STARTERS
    }


def label_for(text: str) -> str | None:
    """The label of a starter whose message is exactly ``text``, in that message's language
    (a chat begun by a starter is titled "Where should I click?", not by its instructions);
    None for any other text."""
    return _labels_by_message().get(text.strip())


@cache
def _labels_by_message() -> dict[str, str]:
    """Every starter's message, in every language, to its label in the same language."""
    return {
        translator(locale)(starter.message): translator(locale)(starter.label)
        for locale in LOCALES
        for starter in STARTERS
    }
