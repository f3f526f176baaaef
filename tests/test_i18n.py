"""The message catalogue: code and .po agree, every msgid has a Chinese translation that
fits its placeholders, and the app's words come out in the browser's language."""

from __future__ import annotations

import gettext
import json
import pickle
import re
import string
from pathlib import Path

import httpx
import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from backend.errors import ImageError, ServerUnreachable
from backend.events import Done, Usage
from backend.families import THINKING_2506
from backend.i18n import (
    ENGLISH,
    KEYWORDS,
    LOCALES,
    Message,
    Translator,
    catalogue_path,
    load_catalogs,
    locale_for,
    msg,
    translator,
    translator_for,
)
from backend.images import upload_size
from backend.panel import panel_fields
from backend.presenter import THINKING_LABEL, thought_label
from backend.starters import sample_for, starters_for
from backend.timings import Timings, stats_line
from backend.vllm_errors import map_error

ROOT = Path(__file__).resolve().parent.parent
ZH = translator("zh-CN")


def code_msgids() -> set[str]:
    """Every msgid marked in the app's code (Babel's extractor, keywords tr and msg)."""
    found: set[str] = set()
    for folder in ("backend", "ui"):
        for _, _, message, _, _ in extract_from_dir(
            ROOT / folder, method_map=[("**.py", "python")], keywords=KEYWORDS
        ):
            assert isinstance(message, str)
            found.add(message)
    for _, _, message, _, _ in extract_from_dir(
        ROOT, method_map=[("app.py", "python")], keywords=KEYWORDS
    ):
        assert isinstance(message, str)
        found.add(message)
    return found


def po_entries() -> dict[str, tuple[str, bool]]:
    """msgid -> (msgstr, fuzzy) of the zh-CN catalogue."""
    with catalogue_path("zh-CN").open("rb") as po:
        catalog = read_po(po)
    return {m.id: (str(m.string), m.fuzzy) for m in catalog if m.id and isinstance(m.id, str)}


def fields(template: str) -> list[tuple[str, str]]:
    """The ``(name, format spec)`` of each placeholder of a format string, sorted."""
    return sorted(
        (name, spec or "") for _, name, spec, _ in string.Formatter().parse(template) if name
    )


def test_the_code_and_the_catalogue_have_the_same_msgids() -> None:
    in_code, in_po = code_msgids(), set(po_entries())
    assert len(in_code) > 100  # the scan found the app's words, not nothing
    assert sorted(in_code - in_po) == [], "msgids missing from the .po"
    assert sorted(in_po - in_code) == [], "msgids in the .po that the code no longer has"


def test_every_msgid_has_a_chinese_translation_with_the_same_placeholders() -> None:
    for msgid, (msgstr, fuzzy) in po_entries().items():
        assert msgstr and not fuzzy, msgid
        assert fields(msgstr) == fields(msgid), msgid
        if msgid != "Top p":  # a parameter's name, kept as is
            assert msgstr != msgid, msgid


def test_no_sentence_a_person_reads_names_the_servers_address_or_its_log() -> None:
    """Defect: "Cannot reach the model server at http://127.0.0.1:.../v1 ... (launch.sh
    restarts it; see llm.log)" and "Try again, or check llm.log" were the person's words;
    the address, the launcher and the log are the operator's (app.log's warnings)."""
    operators = re.compile(r"llm\.log|launch\.sh|\{url\}|https?://|127\.0\.0\.1")
    said = [msgid for msgid in code_msgids() if operators.search(msgid)]
    assert said == []


def test_english_is_the_msgids_and_chinese_comes_from_the_catalogue() -> None:
    assert thought_label(12.34) == "Thought for 12.3s"
    assert thought_label(12.34, tr=ZH) == "思考了 12.3 秒"
    assert thought_label(3.0, "stopped", ZH) == "思考了 3.0 秒（已停止）"
    assert ZH(THINKING_LABEL) == "思考中…"
    done = Done(
        finish_reason="stop", usage=Usage(10, 64), elapsed_s=2.0, ttft_s=0.5, reasoning_s=1.25
    )
    assert stats_line(Timings.from_done(done), ZH) == (
        "首字延迟 0.50 秒 · 思考 1.2 秒 · 64 个 token · 42.0 token/秒 · 总计 2.0 秒"
    )


def test_settings_panel_labels_and_descriptions_follow_the_language() -> None:
    from backend.chat import SamplingOptions

    options = SamplingOptions.for_profile(THINKING_2506, 32768)
    labels = [f.label for f in panel_fields(THINKING_2506, options, 32768, ZH)]
    assert labels == ["温度", "Top p", "最大 token 数", "隐藏推理过程", "回答下方的用时"]
    english = [f.label for f in panel_fields(THINKING_2506, options, 32768)]
    assert english == [
        "Temperature",
        "Top p",
        "Max tokens",
        "Hide reasoning",
        "Timings under answers",
    ]
    temperature = panel_fields(THINKING_2506, options, 32768, ZH)[0].description
    assert temperature == "回答的随机程度。Kimi-VL Thinking (2506) 的推荐值：0.8。"


def test_a_message_is_its_english_text_until_rendered_and_survives_pickling() -> None:
    inner = msg("page {numbers}", numbers="2")
    outer = msg("{name}: {sent} of {pages} sent as images", name="a.pdf", sent=inner, pages=5)
    assert outer == "a.pdf: page 2 of 5 sent as images"
    assert isinstance(outer, str)
    copy = pickle.loads(pickle.dumps(outer))  # as it comes back from a media worker process
    assert isinstance(copy, Message) and copy == outer
    assert ZH(copy) == "a.pdf：共 5 页，已将第 2 页作为图片发送"
    assert ZH.text(copy) == ZH(copy)
    assert ZH.text("vLLM's own words {not a field}") == "vLLM's own words {not a field}"


def test_an_error_from_the_client_is_english_for_the_cli_and_chinese_in_the_ui() -> None:
    refused = httpx.ConnectError("connection refused")
    error = map_error(refused, base_url="http://127.0.0.1:9/v1", model="m")
    assert isinstance(error, ServerUnreachable)
    assert str(error).startswith("The model server cannot be reached right now")
    assert "127.0.0.1" not in str(error) and "llm.log" not in str(error)  # the operator's
    assert ZH.text(error.message).startswith("现在连不上模型服务器")


def test_a_file_problem_raised_deep_in_the_backend_is_translated(tmp_path: Path) -> None:
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(ImageError) as raised:
        upload_size(empty, "empty.png", None)
    assert str(raised.value) == "empty.png: the file is empty (0 bytes)"
    unpickled = pickle.loads(pickle.dumps(raised.value))  # process pool round trip
    assert ZH.text(unpickled.message) == "empty.png：文件是空的（0 字节）"


def test_starters_in_chinese_still_attach_their_sample() -> None:
    chinese = starters_for("zh-CN")
    assert [s.label for s in chinese] == ["读这一页", "照片里有什么？", "该点哪里？", "找到勺子"]
    assert chinese[3].message.startswith('在这张照片里找到勺子。请用 JSON 给出它的框：{"bbox_2d"')
    assert sample_for(chinese[1].message) == chinese[1].path
    english = starters_for("en-US")
    assert english[0].label == "Read this page"
    assert sample_for(english[1].message) == english[1].path
    assert sample_for("What is in this sample photo? Please.") is None


@pytest.mark.parametrize(
    ("language", "locale"),
    [
        ("zh-CN", "zh-CN"),
        ("zh", "zh-CN"),
        ("zh-Hans", "zh-CN"),
        ("zh-SG", "zh-CN"),
        ("zh_CN", "zh-CN"),
        ("zh-TW", "en"),  # Traditional: Chainlit's zh-CN.json would not apply either
        ("zh-HK", "en"),
        ("en-US", "en"),
        ("fr-FR", "en"),
        ("", "en"),
        (None, "en"),
        ("not a tag!", "en"),
    ],
)
def test_browser_languages_map_onto_the_two_locales(language: str | None, locale: str) -> None:
    assert locale_for(language) == locale
    assert translator_for(language).locale == locale


def test_a_translation_that_breaks_its_placeholders_falls_back_to_english() -> None:
    class Broken(gettext.NullTranslations):
        def gettext(self, message: str) -> str:
            return "坏的 {nope}"

    broken = Translator("zh-CN", Broken())
    assert broken("Thought for {seconds:.1f}s", seconds=1.0) == "Thought for 1.0s"
    assert ENGLISH("{count} tokens", count=3) == "3 tokens"


def test_chainlit_translation_files_cover_the_same_keys() -> None:
    folder = ROOT / ".chainlit" / "translations"

    def keys(tree: object, prefix: str = "") -> set[str]:
        if isinstance(tree, dict):
            return set().union(*(keys(v, f"{prefix}{k}.") for k, v in tree.items()))
        return {prefix}

    english = json.loads((folder / "en-US.json").read_text(encoding="utf-8"))
    chinese = json.loads((folder / "zh-CN.json").read_text(encoding="utf-8"))
    assert keys(chinese) == keys(english)


def test_the_server_panel_table_is_in_the_readers_language() -> None:
    from backend.metrics import ServerLoad, panel_rows

    load = ServerLoad("kimi", 1, 1, 0, 0.0127, 3446.0, None, 0.7088, 0.9333)
    assert panel_rows(load, ZH) == [
        ("生成中", "1 个请求"),
        ("等待中", "0 个请求"),
        ("KV 缓存占用", "1.3 %"),
        ("提示 token", "3,446 token/秒"),
        ("生成 token", "测量中…"),
        ("前缀缓存命中率", "70.9 %"),
        ("图片缓存命中率", "93.3 %"),
    ]


async def test_a_refusal_before_any_chat_speaks_the_requests_language() -> None:
    from ui.language import header_translator
    from ui.security import refuse

    assert header_translator("zh-CN,zh;q=0.9,en;q=0.8").locale == "zh-CN"
    assert header_translator("en-GB,zh-CN;q=0.5").locale == "en"
    assert header_translator(None).locale == "en"
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    async def send(message: object) -> None:
        assert isinstance(message, dict)
        sent.append(message)

    scope = {"type": "http", "headers": [(b"accept-language", b"zh-CN,zh;q=0.9")]}
    await refuse(scope, receive, send, 413, msg("This request is too large."))
    assert sent[0]["status"] == 413
    body = sent[1]["body"]
    assert isinstance(body, bytes)
    assert json.loads(body) == {"detail": "这个请求太大了。"}


def test_an_exported_chat_is_in_the_readers_language() -> None:
    from backend.conversation import Turn
    from backend.record import TurnRecord
    from backend.store.export import ChatExport, export_html

    turn = Turn(
        text="这是什么？", images=[], answer="一枚火箭。", reasoning="嗯……", status="stopped"
    )
    chat = ChatExport(
        "这是什么？",
        "Kimi-VL",
        {},
        [TurnRecord(0, "m", turn, timings=Timings(reasoning_s=3.24))],
        "now",
    )
    chinese = export_html(chat, ZH)
    assert '<html lang="zh-CN">' in chinese
    assert "<dt>模型</dt>" in chinese and "<dt>导出时间</dt>" in chinese
    assert "<summary>思考了 3.2 秒</summary>" in chinese
    assert '<div class="note">在结束前停止了。</div>' in chinese
    english = export_html(chat)
    assert '<html lang="en">' in english and "<summary>Thought for 3.2s</summary>" in english


def test_a_command_id_shown_in_chinese_is_recognised_when_it_comes_back() -> None:
    from backend.i18n import in_any_language

    assert ZH(msg("Server")) == "服务器"
    assert in_any_language(msg("Server"), "服务器")
    assert in_any_language(msg("Server"), "Server")
    assert not in_any_language(msg("Server"), "Export")
    assert not in_any_language(msg("Server"), None)


def test_the_waiting_note_translates_the_problem_it_quotes() -> None:
    from backend.presenter import waiting_note

    error = map_error(httpx.ConnectError("refused"), base_url="http://h:1/v1", model="m")
    note = waiting_note(error.message, ZH)  # the address is escaped: no link of it
    assert note.startswith("**正在等待模型服务器。** 现在连不上模型服务器")
    assert note.endswith("*这条提示会随时更新，服务器就绪后即消失。*")
    assert waiting_note(error.message).startswith(
        "**Waiting for the model server.** The model server cannot be reached right now"
    )


def test_loading_the_catalogs_compiles_every_locale_once() -> None:
    """The app compiles them at its start (backend/resources.py), so that no question
    pays for Babel's parsing; afterwards every locale's translator is the kept one."""
    translator.cache_clear()
    load_catalogs()
    assert translator.cache_info().currsize == len(LOCALES)
    kept = {locale: translator(locale) for locale in LOCALES}
    assert translator.cache_info().misses == len(LOCALES)
    assert kept["zh-CN"](msg("Model")) == "模型"  # the catalogue, not English
