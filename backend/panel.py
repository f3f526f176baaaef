"""The settings panel and the model choice, as plain data the Chainlit app renders.

:func:`panel_fields` says which controls the settings panel shows for a model
(sampling defaults come from :class:`backend.chat.SamplingOptions`, i.e. from the
model's profile); :func:`option_changes` turns the panel's values back into
:meth:`backend.chat.ChatSession.with_options` keywords. :func:`profile_choices`
builds one chat profile per served model (from
:class:`backend.models.ModelDirectory`) when the server serves several.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from backend.chat import SamplingOptions
from backend.client import ServedModel
from backend.i18n import ENGLISH, Translator
from backend.settings import ModelProfile, profile_for

MIN_MAX_TOKENS = 256
"""The smallest answer budget the panel offers (and its step)."""


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
    profile: ModelProfile, options: SamplingOptions, max_model_len: int, tr: Translator = ENGLISH
) -> list[PanelField]:
    """The controls for a model: temperature, top_p, max tokens, and for a
    thinking model a switch to hide the reasoning; labels in ``tr``'s language.

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
            min=0,
            max=2,
            step=0.05,
        ),
        PanelField(
            "top_p",
            tr("Top p"),
            "slider",
            options.top_p,
            tr("Sample only from the most likely tokens that add up to this share."),
            min=0.05,
            max=1,
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
    if profile.thinking:
        fields.append(
            PanelField(
                "hide_reasoning",
                tr("Hide reasoning"),
                "switch",
                not options.show_reasoning,
                tr("Show only the answer, not the model's thinking before it."),
            )
        )
    return fields


def option_changes(values: Mapping[str, object]) -> dict[str, float | int | bool]:
    """Keyword changes for :meth:`ChatSession.with_options` from the panel's values.

    Unknown keys are ignored; the switch "hide reasoning" becomes ``show_reasoning``.
    """
    changes: dict[str, float | int | bool] = {}
    for key in ("temperature", "top_p"):
        value = values.get(key)
        if isinstance(value, int | float):
            changes[key] = round(float(value), 2)
    tokens = values.get("max_tokens")
    if isinstance(tokens, int | float):
        changes["max_tokens"] = int(tokens)
    hide = values.get("hide_reasoning")
    if isinstance(hide, bool):
        changes["show_reasoning"] = not hide
    return changes


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """One entry of the model choice: the served name and what people read."""

    name: str
    label: str
    description: str
    default: bool


def profile_choices(models: Sequence[ServedModel], tr: Translator = ENGLISH) -> list[ProfileChoice]:
    """One choice per served model, the first served one as default, in ``tr``'s language.

    Empty when the server serves fewer than two models: there is nothing to choose.
    """
    if len(models) < 2:
        return []
    choices = []
    for index, model in enumerate(models):
        profile = profile_for(model.id)
        kind = (
            tr("Reasons step by step before it answers (slower, better at hard questions).")
            if profile.thinking
            else tr("Answers at once, without a reasoning step.")
        )
        label = tr.text(profile.label)
        choices.append(ProfileChoice(model.id, label, f"**{label}** · {kind}", index == 0))
    return choices
