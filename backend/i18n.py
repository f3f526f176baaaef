"""The app's words in English and Simplified Chinese, from one gettext catalogue.

Every sentence the app shows is an English msgid in the code, marked where it is
written by one of two calls that Babel's extractor finds (keywords ``tr`` and ``msg``):

- ``tr("Thought for {seconds:.1f}s", seconds=12.3)`` with a :class:`Translator`
  (``ENGLISH`` by default in the backend, the chat's language in the UI): the
  finished text in that language, for functions that build words to show.
- ``msg("{name}: the file is empty (0 bytes)", name="a.png")``: a :class:`Message`,
  a ``str`` whose value is the English text and which remembers its msgid and
  parameters, for words made deep in the backend (exceptions, file problems,
  notices) that travel to the UI, which re-renders them with ``tr(message)``.
  ``str()`` and the CLI read English; nothing else changes for code that treats
  them as text.

Placeholders are named ``str.format`` fields (no plurals: the sentences are written
so that one form reads right for any number); every msgid is a format string, so a
literal brace is doubled (``{{``). Parameters that are themselves :class:`Message`
objects are translated too, so a sentence can embed another. Text that may or may
not be the app's (a notice, an error's sentence) goes through ``tr.text(value)``,
which renders a :class:`Message` and leaves any other text as it is.

The Chinese catalogue is ``backend/locale/zh_CN/LC_MESSAGES/messages.po``, compiled
in memory with Babel (no ``.mo`` file to build or to go stale): by the app at its start,
in a thread (:func:`load_catalogs`), else on first use.
"""

from __future__ import annotations

import gettext
import io
import logging
from functools import cache
from pathlib import Path
from typing import Final

from babel import Locale, UnknownLocaleError
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

LOCALE_DIR: Final = Path(__file__).resolve().parent / "locale"
"""Where the catalogues live: ``<LOCALE_DIR>/<babel locale>/LC_MESSAGES/messages.po``."""

DOMAIN: Final = "messages"
LOCALES: Final = ("en", "zh-CN")
"""The languages the app speaks, as BCP 47 tags (English is the msgids themselves)."""

KEYWORDS: Final = {"tr": None, "msg": None}
"""Babel extraction keywords: the first argument of ``tr(...)`` and ``msg(...)`` is a msgid."""

log = logging.getLogger(__name__)


class Message(str):
    """Words made in the backend: the English text, plus what re-renders them elsewhere.

    Attributes:
        msgid: the English template, a msgid of the catalogue.
        params: its named placeholders' values (may hold other :class:`Message` objects).
    """

    msgid: str
    params: dict[str, object]

    def __new__(cls, msgid: str, params: dict[str, object]) -> Message:
        """A message for ``msgid`` with ``params``; its ``str`` value is the English text."""
        text = super().__new__(cls, _render(msgid, params, ENGLISH))
        text.msgid = msgid
        text.params = params
        return text

    def __reduce__(self) -> tuple[type[Message], tuple[str, dict[str, object]]]:
        """Pickle as msgid and params (messages cross into the media worker processes)."""
        return (Message, (self.msgid, self.params))


def msg(msgid: str, /, **params: object) -> Message:
    """Mark ``msgid`` for the catalogue and bind its placeholders; English until rendered.

    Raises:
        KeyError: a placeholder of ``msgid`` has no value in ``params``.
    """
    return Message(msgid, params)


def _render(msgid: str, params: dict[str, object], translator: Translator) -> str:
    """``msgid`` in the translator's language with ``params`` filled in (messages translated)."""
    template = translator.gettext(msgid)
    values = {k: translator(v) if isinstance(v, Message) else v for k, v in params.items()}
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError):  # a broken translation: fall back to English
        if template is msgid:
            raise
        log.error("translation of %r does not fit its parameters", msgid)
        return msgid.format(**values)


class Translator:
    """Renders msgids (or :class:`Message` objects) in one language.

    ``tr(msgid, **params)``: ``msgid`` looked up, then formatted with ``params``
    (a :class:`Message` brings its own msgid and parameters). ``tr.text(value)``:
    a :class:`Message` rendered, any other text unchanged (e.g. a server's own
    error detail).
    """

    def __init__(self, locale: str, translations: gettext.NullTranslations) -> None:
        self.locale = locale
        self._translations = translations

    def gettext(self, msgid: str) -> str:
        """The translation of ``msgid``, or ``msgid`` itself when there is none."""
        return self._translations.gettext(msgid)

    def __call__(self, text: str, /, **params: object) -> str:
        """``text`` in this language with its placeholders filled in."""
        if isinstance(text, Message):
            return _render(text.msgid, text.params | params, self)
        return _render(text, params, self)

    def text(self, value: str) -> str:
        """``value`` in this language if it is a :class:`Message`, else ``value`` itself."""
        return self(value) if isinstance(value, Message) else value

    def __repr__(self) -> str:
        return f"Translator({self.locale!r})"


ENGLISH: Final = Translator("en", gettext.NullTranslations())
"""English: the msgids as written in the code; the CLI's and the backend's default."""


def catalogue_path(locale: str) -> Path:
    """The ``.po`` file of a locale tag: ``"zh-CN"`` -> ``zh_CN/LC_MESSAGES/messages.po``."""
    return LOCALE_DIR / locale.replace("-", "_") / "LC_MESSAGES" / f"{DOMAIN}.po"


@cache
def translator(locale: str) -> Translator:
    """The translator for one of :data:`LOCALES` (anything else: English).

    The ``.po`` file is read with Babel and compiled to gettext's binary form in
    memory; fuzzy entries are left out, as ``msgfmt`` does.
    """
    if locale not in LOCALES or locale == "en":
        return ENGLISH
    with catalogue_path(locale).open("rb") as po:
        catalog = read_po(po, locale=locale.replace("-", "_"))
    compiled = io.BytesIO()
    write_mo(compiled, catalog, use_fuzzy=False)
    compiled.seek(0)
    return Translator(locale, gettext.GNUTranslations(compiled))


def load_catalogs() -> None:
    """Compile every locale's translations now (:func:`translator` keeps them), Babel's
    locale data with them; for a worker thread at the app's start
    (:meth:`backend.resources.AppResources.start_housekeeping`)."""
    for locale in LOCALES:
        translator(locale)


def locale_for(language: str | None) -> str:
    """The app's locale for a browser language tag (BCP 47, e.g. ``Accept-Language``'s first).

    Simplified Chinese (``zh``, ``zh-CN``, ``zh-SG``, ``zh-Hans-*``) -> ``"zh-CN"``;
    anything else, including Traditional Chinese (``zh-TW``, ``zh-HK``, ``zh-Hant``),
    which Chainlit's own ``zh-CN.json`` would not cover either, or no tag -> ``"en"``.
    """
    if not language:
        return "en"
    try:
        parsed = Locale.parse(language.strip().replace("_", "-"), sep="-")
    except (ValueError, TypeError, UnknownLocaleError):
        return "en"
    # Babel fills in the likely script (zh-TW -> Hant, zh-SG -> Hans); bare "zh" has none.
    if parsed.language == "zh" and parsed.script in ("Hans", None):
        return "zh-CN"
    return "en"


def in_any_language(message: str, text: str | None) -> bool:
    """True if ``text`` is ``message`` (a msgid or :class:`Message`) in one of :data:`LOCALES`
    (e.g. a command's id, which Chainlit shows as its button text, coming back)."""
    return text is not None and any(translator(locale)(message) == text for locale in LOCALES)


def translator_for(language: str | None) -> Translator:
    """The translator for a browser language tag (see :func:`locale_for`)."""
    return translator(locale_for(language))
