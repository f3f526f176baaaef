"""The settings panel and the model choice, as plain data the Chainlit app renders.

:func:`panel_fields` says which controls the settings panel shows for a model
(sampling defaults come from :class:`backend.chat.SamplingOptions`, i.e. from the
model's profile); :func:`option_changes` turns the panel's values back into
:meth:`backend.chat.ChatSession.with_options` keywords, refusing (:class:`SettingsRefused`)
any the panel's controls cannot give: the values come over the socket, from the browser or
from anyone who speaks its protocol; :func:`sane_options` does the same for stored ones.
:func:`model_choices` builds one entry of the model picker per served model (from
:class:`backend.models.ModelDirectory`) when the servers serve several.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

from backend.chat import SamplingOptions
from backend.client import ServedModel
from backend.errors import ChatError
from backend.families import ModelFamily, family_for
from backend.i18n import ENGLISH, Message, Translator, msg

MIN_MAX_TOKENS = 256
"""The smallest answer budget the panel offers (and its step)."""

TEMPERATURE_RANGE: Final = (0.0, 2.0)
TOP_P_RANGE: Final = (0.05, 1.0)
"""What the panel's sliders offer, and all the app accepts: vLLM takes any temperature
from 0 and top p in (0, 1], but a value from the socket is not checked by the browser."""


class SettingsRefused(ChatError):
    """A value from the settings panel is not one its control can give (NaN, Infinity,
    1e308, top p -1, a string, ...): nothing of that change is applied."""


@dataclass(frozen=True, slots=True)
class PanelField:
    """One control of the settings panel: a slider or a switch."""

    id: str
    label: str
    kind: Literal["slider", "switch"]
    initial: float | bool
    description: str
    min: float = 0
    max: float = 1
    step: float = 1


def panel_fields(
    profile: ModelFamily, options: SamplingOptions, max_model_len: int, tr: Translator = ENGLISH
) -> list[PanelField]:
    """The controls for a model: temperature, top_p, max tokens, for a thinking model a
    switch to hide the reasoning, and a switch for the timings under answers; labels in
    ``tr``'s language.

    ``options`` are the current values (the profile's defaults in a new chat).
    Max tokens goes up to half the max model length (the other half is for the
    prompt and images), and never below the current value.
    """
    token_cap = max(MIN_MAX_TOKENS, max_model_len // 2 // MIN_MAX_TOKENS * MIN_MAX_TOKENS)
    fields = [
        PanelField(
            "temperature",
            tr("Temperature"),
            "slider",
            options.temperature,
            tr(
                "Randomness of the answer. Recommended for {model}: {temperature}.",
                model=tr.text(profile.label),
                temperature=profile.temperature,
            ),
            min=TEMPERATURE_RANGE[0],
            max=TEMPERATURE_RANGE[1],
            step=0.05,
        ),
        PanelField(
            "top_p",
            tr("Top p"),
            "slider",
            options.top_p,
            tr("Sample only from the most likely tokens that add up to this share."),
            min=TOP_P_RANGE[0],
            max=TOP_P_RANGE[1],
            step=0.05,
        ),
        PanelField(
            "max_tokens",
            tr("Max tokens"),
            "slider",
            options.max_tokens,
            tr("Longest answer, reasoning included, in tokens."),
            min=MIN_MAX_TOKENS,
            max=max(token_cap, options.max_tokens),
            step=MIN_MAX_TOKENS,
        ),
    ]
    if profile.starts_in_reasoning:
        fields.append(
            PanelField(
                "hide_reasoning",
                tr("Hide reasoning"),
                "switch",
                not options.show_reasoning,
                tr("Show only the answer, not the model's thinking before it."),
            )
        )
    fields.append(
        PanelField(
            "show_stats",
            tr("Timings under answers"),
            "switch",
            options.show_stats,
            tr(
                "A line under each answer: time to first token (TTFT), thinking time, "
                "tokens and tokens per second."
            ),
        )
    )
    return fields


def option_changes(
    values: Mapping[str, object], fields: Sequence[PanelField]
) -> dict[str, float | int | bool]:
    """Keyword changes for :meth:`ChatSession.with_options` from the panel's values.

    Each value is checked against its control in ``fields`` (:func:`panel_fields` for the
    chat's model and options): a finite number within a slider's range, a whole number of
    max tokens, true or false for a switch. Unknown keys are ignored; the switch "hide
    reasoning" becomes ``show_reasoning``; temperature and top p are rounded to 2 places.

    Raises:
        SettingsRefused: a value its control cannot give; the sentence names the first
            such setting and what it must be. Nothing is applied then.
    """
    changes: dict[str, float | int | bool] = {}
    for field in fields:
        if field.id not in values:
            continue
        value = values[field.id]
        if not _fits(field, value):
            raise SettingsRefused(_rule(field))
        if field.id == "hide_reasoning":
            changes["show_reasoning"] = not value
        elif field.kind == "switch":
            changes[field.id] = bool(value)
        elif field.id == "max_tokens":
            changes["max_tokens"] = int(cast(float, value))
        else:
            changes[field.id] = round(float(cast(float, value)), 2)
    return changes


def _fits(field: PanelField, value: object) -> bool:
    """True if ``value`` is one that ``field``'s control can give."""
    if field.kind == "switch":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    number = float(value)
    whole = field.id != "max_tokens" or number.is_integer()
    return math.isfinite(number) and field.min <= number <= field.max and whole


def _rule(field: PanelField) -> Message:
    """The sentence that refuses a value of ``field``, saying what it must be."""
    if field.kind == "switch":
        return msg(
            "The settings were not changed: {setting} must be on or off.", setting=field.label
        )
    if field.id == "max_tokens":
        return msg(
            "The settings were not changed: {setting} must be a whole number from {low} to {high}.",
            setting=field.label,
            low=int(field.min),
            high=int(field.max),
        )
    return msg(
        "The settings were not changed: {setting} must be a number from {low:g} to {high:g}.",
        setting=field.label,
        low=field.min,
        high=field.max,
    )


def sane_options(stored: Mapping[str, object], max_model_len: int) -> dict[str, object]:
    """The sampling options of ``stored`` (a stored turn's, by :class:`SamplingOptions` field
    name) that the panel could have given; anything else is left out (NaN, Infinity or
    1e308 from before values were checked, another type). ``max_tokens``: from 1 to
    ``max_model_len``."""
    ranges = {
        "temperature": TEMPERATURE_RANGE,
        "top_p": TOP_P_RANGE,
        "max_tokens": (1, max_model_len),
    }
    kept: dict[str, object] = {}
    for key, value in stored.items():
        if key in ("show_reasoning", "show_stats") and isinstance(value, bool):
            kept[key] = value
        elif key in ranges and isinstance(value, int | float) and not isinstance(value, bool):
            low, high = ranges[key]
            if math.isfinite(value) and low <= value <= high:
                kept[key] = int(value) if key == "max_tokens" else float(value)
    return kept


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One entry of the model picker: the served name and what people read (plain text);
    ``default``: the one the chat answers with now."""

    name: str
    label: str
    description: str
    default: bool


def model_choices(
    models: Sequence[ServedModel], current: str | None = None, tr: Translator = ENGLISH
) -> list[ModelChoice]:
    """One choice per served model in ``tr``'s language, ``current`` (a served name) as the
    default, else the first served.

    Empty when the server serves fewer than two models: there is nothing to choose.
    """
    if len(models) < 2:
        return []
    chosen = current if any(m.id == current for m in models) else models[0].id
    choices = []
    for model in models:
        profile = family_for(model.id)
        kind = (
            tr("Reasons step by step before it answers (slower, better at hard questions).")
            if profile.starts_in_reasoning
            else tr("Answers at once, without a reasoning step.")
        )
        choices.append(ModelChoice(model.id, tr.text(profile.label), kind, model.id == chosen))
    return choices
