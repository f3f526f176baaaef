"""Settings panel fields, panel values to options, chat profiles, starters, UI notes."""

from __future__ import annotations

from backend.chat import SamplingOptions
from backend.client import ServedModel
from backend.panel import option_changes, panel_fields, profile_choices
from backend.presenter import ready_note, stopped_note, unusable_files_note, waiting_note
from backend.settings import DEV, INSTRUCT, THINKING_2506
from backend.starters import sample_for, starters_for
from tests.conftest import DATA


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


def test_max_tokens_range_never_hides_the_current_value() -> None:
    options = SamplingOptions(temperature=0.8, top_p=1.0, max_tokens=3000)
    (tokens,) = [f for f in panel_fields(DEV, options, 4096) if f.id == "max_tokens"]
    assert tokens.min == 256 and tokens.max == 3000 and tokens.step == 256


def test_option_changes_maps_the_panel_values() -> None:
    values = {"temperature": 0.6000001, "top_p": 1, "max_tokens": 4096.0, "hide_reasoning": True}
    assert option_changes(values) == {
        "temperature": 0.6,
        "top_p": 1.0,
        "max_tokens": 4096,
        "show_reasoning": False,
    }
    assert option_changes({"other": 1}) == {}


def test_profiles_only_when_several_models_are_served() -> None:
    thinking = ServedModel("kimi-vl-thinking-2506", 131072)
    assert profile_choices([thinking]) == []
    choices = profile_choices([thinking, ServedModel("kimi-vl", 131072)])
    assert [(c.name, c.label, c.default) for c in choices] == [
        ("kimi-vl-thinking-2506", "Kimi-VL Thinking (2506)", True),
        ("kimi-vl", "Kimi-VL Instruct", False),
    ]
    assert "without a reasoning step" in choices[1].description


def test_starters_attach_bundled_copies_of_the_test_images() -> None:
    for language in ("en-US", "zh-CN", None):
        for starter in starters_for(language):
            assert sample_for(f"  {starter.message}\n") == starter.path
            assert starter.path.read_bytes() == (DATA / starter.image).read_bytes()
            assert starter.icon_url == f"/public/samples/{starter.image}"
    assert starters_for("zh-CN")[0].label == "读这一页"
    assert sample_for("Read this page") is None  # only a starter's exact message


def test_notes_read_well() -> None:
    assert stopped_note("") == "*■ Stopped while thinking: the reasoning so far is kept above.*"
    assert stopped_note("Half an").startswith("Half an\n\n*■ Stopped before the end")
    assert waiting_note("Cannot reach it.").startswith("**Waiting for the model server.** Cannot")
    assert (
        ready_note("Kimi-VL Instruct")
        == "✓ **The model server is ready** (Kimi-VL Instruct). Ask away."
    )


def test_unusable_files_note_names_each_file_and_offers_what_is_possible() -> None:
    note = unusable_files_note(["a.jpg: empty file", "b.png: not an image"], can_send=True)
    assert "- a.jpg: empty file\n- b.png: not an image" in note
    assert note.endswith("or send it without them.")
    assert unusable_files_note(["a.jpg: empty file"], can_send=False).endswith("send again.")
