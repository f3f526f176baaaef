"""Settings panel fields, panel values to options, the model picker, starters, UI notes."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import math

import httpx
import pytest
from markdown_it import MarkdownIt

from backend.chat import SamplingOptions
from backend.client import ServedModel
from backend.events import Done, Usage
from backend.families import DEV, INSTRUCT, THINKING_2506
from backend.i18n import ENGLISH, msg, translator
from backend.panel import (
    PanelField,
    SettingsRefused,
    model_choices,
    option_changes,
    panel_fields,
    sane_options,
)
from backend.presenter import (
    ready_note,
    rerun_note,
    stopped_note,
    unusable_files_note,
    upload_refusal,
    waiting_note,
)
from backend.render import Ending, finished
from backend.starters import sample_for, starters_for
from bench.harness import Tab, question, running_stack
from tests.conftest import DATA, RunningFake


def test_thinking_panel_has_model_card_defaults_and_a_hide_switch() -> None:
    options = SamplingOptions.for_profile(THINKING_2506, 131072)
    fields = {f.id: f for f in panel_fields(THINKING_2506, options, 131072)}
    assert fields["temperature"].initial == 0.8
    assert fields["max_tokens"].initial == 32768 and fields["max_tokens"].max == 65536
    assert fields["hide_reasoning"].kind == "switch" and fields["hide_reasoning"].initial is False


def test_instruct_panel_has_its_temperature_and_no_reasoning_switch() -> None:
    options = SamplingOptions.for_profile(INSTRUCT, 32768)
    fields = {f.id: f for f in panel_fields(INSTRUCT, options, 32768)}
    assert fields["temperature"].initial == 0.2
    assert "hide_reasoning" not in fields


def test_every_model_has_a_switch_for_the_timings_under_answers() -> None:
    for profile in (THINKING_2506, INSTRUCT, DEV):
        options = SamplingOptions.for_profile(profile, 32768)
        (timings,) = [f for f in panel_fields(profile, options, 32768) if f.id == "show_stats"]
        assert timings.kind == "switch" and timings.initial is True
        assert timings.label == "Timings under answers"
    assert option_changes({"show_stats": False}, thinking_fields()) == {"show_stats": False}
    with pytest.raises(SettingsRefused):
        option_changes({"show_stats": "off"}, thinking_fields())
    assert sane_options({"show_stats": False, "show_reasoning": 1}, 32768) == {"show_stats": False}


def test_the_timings_line_follows_the_switch_and_a_dev_answer_still_says_it_is_noise() -> None:
    done = Done("stop", Usage(10, 64), elapsed_s=2.0, ttft_s=0.5, reasoning_s=None)
    shown = Ending(message_id="m1", max_tokens=4096, more_tokens=None, max_model_len=32768)
    stats = finished("a1", "Hi.", done, shown, ENGLISH)
    assert (stats.content, stats.footer) == (
        "Hi.",
        "*TTFT 0.50 s · 64 tokens · 42.0 tokens/s · total 2.0 s*",
    )
    hidden = dataclasses.replace(shown, show_stats=False)
    assert finished("a1", "Hi.", done, hidden, ENGLISH).footer == ""
    dev = dataclasses.replace(hidden, dev_mode=True)
    assert finished("a1", "Hi.", done, dev, ENGLISH).footer == "*dev model: the text is noise*"


def test_max_tokens_range_never_hides_the_current_value() -> None:
    options = SamplingOptions(temperature=0.8, top_p=1.0, max_tokens=3000)
    (tokens,) = [f for f in panel_fields(DEV, options, 4096) if f.id == "max_tokens"]
    assert tokens.min == 256 and tokens.max == 3000 and tokens.step == 256


def thinking_fields() -> list[PanelField]:
    options = SamplingOptions(temperature=0.8, top_p=1.0, max_tokens=4096)
    return panel_fields(THINKING_2506, options, 32768)


def test_option_changes_maps_the_panel_values() -> None:
    values = {"temperature": 0.6000001, "top_p": 1, "max_tokens": 4096.0, "hide_reasoning": True}
    assert option_changes(values, thinking_fields()) == {
        "temperature": 0.6,
        "top_p": 1.0,
        "max_tokens": 4096,
        "show_reasoning": False,
    }
    assert option_changes({"other": 1}, thinking_fields()) == {}


@pytest.mark.parametrize(
    ("values", "sentence"),
    [
        ({"temperature": math.nan}, "Temperature must be a number from 0 to 2."),
        ({"temperature": math.inf}, "Temperature must be a number from 0 to 2."),
        ({"temperature": 1e308}, "Temperature must be a number from 0 to 2."),
        ({"temperature": True}, "Temperature must be a number from 0 to 2."),
        ({"temperature": "0.5"}, "Temperature must be a number from 0 to 2."),
        ({"temperature": 0.5, "top_p": -1}, "Top p must be a number from 0.05 to 1."),
        ({"max_tokens": 1000.5}, "Max tokens must be a whole number from 256 to 16384."),
        ({"max_tokens": -math.inf}, "Max tokens must be a whole number from 256 to 16384."),
        ({"hide_reasoning": 1}, "Hide reasoning must be on or off."),
    ],
)
def test_values_the_panel_cannot_give_are_refused_in_one_sentence(
    values: dict[str, object], sentence: str
) -> None:
    with pytest.raises(SettingsRefused) as refused:
        option_changes(values, thinking_fields())
    assert str(refused.value) == f"The settings were not changed: {sentence}"


def test_stored_options_keep_only_what_the_panel_could_give() -> None:
    stored = {"temperature": math.nan, "top_p": 0.9, "max_tokens": 1e308, "show_reasoning": 0}
    assert sane_options(stored, 32768) == {"top_p": 0.9}
    good = {"temperature": 0.3, "top_p": 1, "max_tokens": 2048, "show_reasoning": False}
    assert sane_options(good, 32768) == good


def test_model_picker_only_when_several_models_are_served() -> None:
    thinking = ServedModel("kimi-vl-thinking-2506", 131072)
    assert model_choices([thinking]) == []
    served = [thinking, ServedModel("kimi-vl", 131072)]
    choices = model_choices(served)
    assert [(c.name, c.label, c.default) for c in choices] == [
        ("kimi-vl-thinking-2506", "Kimi-VL Thinking (2506)", True),
        ("kimi-vl", "Kimi-VL Instruct", False),
    ]
    assert choices[1].description == "Answers at once, without a reasoning step."
    # The chat's own model is the one picked; a name the server does not serve is not.
    assert [c.default for c in model_choices(served, "kimi-vl")] == [False, True]
    assert [c.default for c in model_choices(served, "gone")] == [True, False]


def test_starters_attach_bundled_copies_of_the_test_images() -> None:
    for language in ("en-US", "zh-CN", None):
        for starter in starters_for(language):
            assert sample_for(f"  {starter.message}\n") == starter.path
            assert starter.path.read_bytes() == (DATA / starter.image).read_bytes()
            assert starter.icon_url == f"/public/samples/{starter.image}"
    assert starters_for("zh-CN")[0].label == "读这一页"
    assert sample_for("Read this page") is None  # only a starter's exact message


def test_notes_read_well() -> None:
    assert stopped_note(False) == "*Stopped while thinking: the reasoning so far is kept above.*"
    assert stopped_note(True) == "*Stopped before the end of the answer.*"
    assert waiting_note("Cannot reach it.").startswith("**Waiting for the model server.** Cannot")
    # A toast: plain text, which the page never reads as markup.
    assert (
        ready_note("Kimi-VL Instruct") == "The model server is ready (Kimi-VL Instruct). Ask away."
    )


def test_unusable_files_note_names_each_file_and_offers_what_is_possible() -> None:
    note = unusable_files_note(["a.jpg: empty file", "b.png: not an image"], can_send=True)
    assert "<li>a.jpg: empty file</li>\n<li>b.png: not an image</li>" in rendered(note)
    assert note.endswith("or send this message without them.")
    assert "message box" not in note  # nothing was put back: it does not say so
    back = unusable_files_note(["a.jpg: empty file"], can_send=True, text_back=True)
    assert "Your text is back in the message box" in back
    assert unusable_files_note(["a.jpg: empty file"], can_send=False).endswith("send again.")


def test_an_upload_refusal_drops_the_file_name_the_page_already_shows() -> None:
    """The page says "Failed to upload <name>:" before the app's sentence."""
    problem = msg("{name}: the file is empty (0 bytes)", name="a: b.jpg")
    assert upload_refusal(problem, "a: b.jpg") == "the file is empty (0 bytes)"
    assert upload_refusal(problem, "a: b.jpg", ZH) == ZH(
        "{name}: the file is empty (0 bytes)", name=""
    ).removeprefix("：")
    assert upload_refusal("no name here", "x.jpg") == "no name here"


ZH = translator("zh-CN")
HOSTILE_NAME = "![x](http://h/a).png"
"""A file name that is markdown for an image of another site."""


def rendered(markdown: str) -> str:
    """The HTML of ``markdown`` (CommonMark, as the page renders it), entities decoded."""
    return html.unescape(MarkdownIt("commonmark").render(markdown))


@pytest.mark.parametrize(
    "note",
    [
        unusable_files_note([msg("{name}: the file is empty (0 bytes)", name=HOSTILE_NAME)], True),
        unusable_files_note(
            [msg("{name}: the file is empty (0 bytes)", name=HOSTILE_NAME)], True, tr=ZH
        ),
        waiting_note(
            msg(
                "The model server does not serve '{wanted}'; it serves nothing.",
                wanted=HOSTILE_NAME,
            )
        ),
        waiting_note(HOSTILE_NAME),  # a server's own words
        rerun_note(HOSTILE_NAME, 0),
        rerun_note(HOSTILE_NAME, 2),
    ],
)
def test_names_in_the_apps_notes_show_as_written_never_as_markup(note: str) -> None:
    shown = rendered(note)
    assert "<img" not in shown and "<a " not in shown
    assert HOSTILE_NAME in shown


# --- the panel's values as they come over the socket, to the real app -------------------


async def refused_until_valid(ui_url: str, fake: RunningFake) -> None:
    """A tab sends settings no slider can give, then a message, then a valid change."""
    async with httpx.AsyncClient() as http:
        tab = Tab(ui_url, http)
        await tab.open()
        panel = {"temperature": 0.8, "top_p": 1.0, "max_tokens": 4096, "hide_reasoning": False}
        for bad in ({"temperature": math.nan}, {"temperature": math.inf},
                    {"temperature": 1e308}, {"top_p": -1}):  # fmt: skip
            await tab.apply_settings(panel | bad)  # JSON NaN/Infinity, as python-socketio sends
            async with asyncio.timeout(20):
                while not any("The settings were not changed" in t for t in tab.texts()):
                    await asyncio.sleep(0.05)
            answer = await tab.ask(question("quick"))
            assert answer.complete and not answer.error, answer
            sent = fake.requests[-1]
            assert (sent["temperature"], sent["top_p"]) == (0.8, 1.0)  # the previous values
        await tab.apply_settings(panel | {"temperature": 0.3})
        assert (await tab.ask(question("quick"))).complete
        assert fake.requests[-1]["temperature"] == 0.3
        assert not any("not changed" in t for t in tab.texts())
        await tab.close()


def test_settings_over_the_socket_are_checked_by_the_app(fake: RunningFake) -> None:
    """NaN, Infinity, 1e308 and top p -1 in ``chat_settings_change`` (Chainlit's socket
    event) are refused with a sentence; the next messages go with the previous values."""
    with running_stack(server_url=fake.base_url) as stack:
        asyncio.run(refused_until_valid(stack.ui_url, fake))
