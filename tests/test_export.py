"""The HTML export: self-contained, rendered as the chat shows it, reasoning collapsed,
nothing from the model runs."""

from __future__ import annotations

from html.parser import HTMLParser

from backend.conversation import Turn
from backend.images import prepare_image
from backend.record import ComparedAnswer, ShownAnswers, TurnRecord
from backend.store.export import ChatExport, answer_key, export_html, marked_copies
from backend.timings import Timings
from tests.conftest import DATA
from tests.fakes.kimi_server import ANSWER, BBOX_ANSWER

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>"\' &amp;'


class Page(HTMLParser):
    """Collects the tags, attributes and text of a document."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(document: str) -> Page:
    page = Page()
    page.feed(document)
    return page


def chat(records: list[TurnRecord]) -> str:
    return export_html(
        ChatExport(
            title=f"title {EVIL}",
            model="Kimi-VL Thinking (2506)",
            options={"temperature": 0.8, "max_tokens": 2048},
            records=records,
            exported_at="2026-12-01 10:00 UTC",
        )
    )


def test_model_text_is_shown_as_text_and_never_runs() -> None:
    image = prepare_image(DATA / "rocket.jpg", 1024, f"{EVIL}.jpg")
    turn = Turn(text=EVIL, images=[image], answer=EVIL, reasoning=EVIL, status="done")
    document = chat(
        [TurnRecord(0, "m", turn, timings=Timings(reasoning_s=3.24), legacy_stats=f"TTFT {EVIL}")]
    )
    page = parse(document)
    tags = [tag for tag, _ in page.tags]
    assert "script" not in tags
    assert all(not name.startswith("on") for _, attrs in page.tags for name in attrs)
    images = [attrs for tag, attrs in page.tags if tag == "img"]
    assert [attrs["src"] for attrs in images] == [image.data_url]  # only ours, inline
    assert images[0]["alt"] == f"{EVIL}.jpg"
    # Every copy of the hostile text is there as text: <title>, <h1>, the message,
    # the reasoning, the answer, the stats line.
    assert "".join(page.text).count('<script>alert("x")</script>') == 6
    csp = next(
        a["content"] for t, a in page.tags if a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp is not None and "default-src 'none'" in csp and "script-src" not in csp


def test_reasoning_is_collapsed_with_its_time_and_the_settings_are_named() -> None:
    turns = [
        TurnRecord(0, "m1", Turn(text="q1", answer="a1", reasoning="r1", status="done"),
                   timings=Timings(0.41, 12.34, 11.0, 512)),
        TurnRecord(1, "m2", Turn(text="q2", status="stopped"), stored_status="interrupted"),
    ]  # fmt: skip
    document = chat(turns)
    page = parse(document)
    assert [t for t, _ in page.tags].count("details") == 1
    details = next(a for t, a in page.tags if t == "details")
    assert "open" not in details
    assert "Thought for 12.3s" in page.text
    # The stats line is made from the stored numbers: 511 tokens after the first in 10.59 s.
    assert "TTFT 0.41 s · thought 12.3 s · 512 tokens · 48.3 tokens/s · total 11.0 s" in page.text
    assert "Interrupted: the app stopped before this answer ended." in page.text
    assert {"Kimi-VL Thinking (2506)", "Temperature", "0.8", "Max tokens", "2048"} <= set(page.text)
    assert "temperature" not in page.text and "max_tokens" not in page.text  # labels, not keys
    assert "http://" not in document and "https://" not in document  # opens offline


def test_answers_read_as_the_chat_shows_them() -> None:
    """Defect: answers were their Markdown source (``##``, ``**``, ``$$``, fences)."""
    turn = Turn(text="Q", answer=ANSWER, reasoning="Let me **think**.", status="done")
    page = parse(chat([TurnRecord(0, "m", turn, timings=Timings(reasoning_s=1.5))]))
    tags = [tag for tag, _ in page.tags]
    for tag in ("h2", "strong", "ul", "li", "pre", "code", "math", "mfrac", "details"):
        assert tag in tags, tag
    text = "".join(page.text)
    assert "What the picture shows" in text and "##" not in text and "**" not in text
    assert "$$" not in text and "```" not in text
    assert "print('liftoff')" in text
    code = [attrs for tag, attrs in page.tags if tag == "code" and attrs.get("class")]
    assert code == [{"class": "language-python"}]


def test_math_is_mathml_and_cannot_carry_markup() -> None:
    """latex2mathml copies ``\\text{...}`` unescaped: its output is rebuilt, not trusted."""
    evil = (
        r"$\text{<img src=x onerror=alert(1)>}$ and $\href{javascript:alert(1)}{x}$ "
        r"$\text{<b>bold</b>}$ $\frac{1}{$ $x^2$"
    )
    page = parse(chat([TurnRecord(0, "m", Turn(text="Q", answer=evil, status="done"))]))
    assert [tag for tag, _ in page.tags].count("math") == 3  # \href, the <b>, x^2
    assert not any(tag in ("img", "a", "b") for tag, _ in page.tags)
    assert "bold" in page.text
    assert all("href" not in attrs and not any(k.startswith("on") for k in attrs)
               for _, attrs in page.tags)  # fmt: skip
    assert "\\text{<img src=x onerror=alert(1)>}" in "".join(page.text)  # as its source
    assert r"\frac{1}{" in "".join(page.text)  # not convertible: shown as its source


def test_open_mode_has_the_times_compare_answers_and_the_drawn_copies() -> None:
    """Defect: in open mode no "Thought for N s" and no stats; no Compare answers and no
    grounding overlays in any mode."""
    image = prepare_image(DATA / "coffee.png", 16384, "coffee.png")
    turn = Turn(text="Find the spoon", images=[image], answer=BBOX_ANSWER, reasoning="r",
                status="done")  # fmt: skip
    shown = ShownAnswers()
    timings = Timings(ttft_s=0.4, reasoning_s=2.5, completion_tokens=80, elapsed_s=3.0)
    shown.ended("m", turn, timings, None)
    other = Turn(text=turn.text, images=turn.images, answer="**Plain** answer", status="done")
    shown.ended(
        "m", other, Timings(ttft_s=0.2, completion_tokens=5, elapsed_s=0.5), "Kimi-VL Instruct"
    )
    records = [shown.completed(TurnRecord(0, "m", turn))]
    document = export_html(
        ChatExport("t", "Kimi-VL Thinking (2506)", {}, records, "now",
                   marked=marked_copies(records))
    )  # fmt: skip
    page = parse(document)
    text = "".join(page.text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert "Thought for 2.5s" in text
    assert "TTFT 0.40 s · thought 2.5 s · 80 tokens" in text
    # Compare: two columns, each labelled with its model at the top (as the chat shows it).
    left, right = lines.index("Kimi-VL Thinking (2506)"), lines.index("Kimi-VL Instruct")
    assert lines[left + 1].startswith("Thought for 2.5s") and lines[right + 1] == "Plain answer"
    assert left < right and "Kimi-VL Instruct · TTFT 0.20 s" in text
    assert "Marked on coffee.png" in text
    images = [attrs["src"] or "" for tag, attrs in page.tags if tag == "img"]
    assert len(images) == 2 and images[0] != images[1]  # the photo and its drawn copy
    assert images[1].startswith("data:image/")


def test_a_resumed_chat_exports_its_stored_compare_answers_and_those_shown_since() -> None:
    """Defect: a resumed chat's export had none of the Compare answers the page showed (they
    were held by the session that showed them). One stored answer stands for one shown:
    the same answer twice, stored once, is exported twice once the second is stored too."""
    turn = Turn(text="q", answer="a", status="done")
    stored = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="b", status="done"))
    shown = ShownAnswers()
    shown.resumed({"m": [stored]}, {"m": "kimi-vl-thinking-2506"})
    assert shown.completed(TurnRecord(0, "m", turn, compared=(stored,))).compared == (stored,)
    same_again = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="b", status="done"))
    shown.ended("m", same_again.turn, None, "Kimi-VL Instruct")  # not stored yet
    answers = shown.completed(TurnRecord(0, "m", turn, compared=(stored,))).compared
    assert [(c.label, c.turn.answer) for c in answers] == [("Kimi-VL Instruct", "b")] * 2
    assert answers[0] is stored
    assert shown.model("m") == "kimi-vl-thinking-2506" and shown.model("n") is None
    text = "".join(parse(chat([shown.completed(TurnRecord(0, "m", turn))])).text)
    assert text.count("Kimi-VL Instruct") == 2


def test_a_switch_of_model_mid_chat_is_marked_where_it_happened() -> None:
    """As the chat shows it: a note before the first turn the other model answered (the
    model of an open-mode turn comes from what the session showed)."""
    shown = ShownAnswers()
    turns = [Turn(text=f"q{i}", answer=f"a{i}", status="done") for i in range(3)]
    for i, model in enumerate(["kimi-vl-thinking-2506", "kimi-vl", "kimi-vl"]):
        shown.ended(f"m{i}", turns[i], None, None, model)
    records = [shown.completed(TurnRecord(i, f"m{i}", t)) for i, t in enumerate(turns)]
    assert [r.model for r in records] == ["kimi-vl-thinking-2506", "kimi-vl", "kimi-vl"]
    text = "".join(parse(chat(records)).text)
    note = "Kimi-VL Instruct answers from here on, with the conversation so far."
    assert text.count(note) == 1
    assert text.index("q0") < text.index(note) < text.index("q1")


def test_a_follow_up_grounding_answer_is_drawn_on_the_photo_its_question_names() -> None:
    """As the chat draws it (backend.grounding.referred_images): the question has no image
    of its own, so the box is drawn on the chat's first photo, which it names."""
    coffee = prepare_image(DATA / "coffee.png", 16384, "coffee.png")
    rocket = prepare_image(DATA / "rocket.jpg", 16384, "rocket.jpg")
    first = Turn(text="What are these?", images=[coffee, rocket], answer="A cup and a rocket.")
    follow_up = Turn(text="Find the spoon in the first photo", answer=BBOX_ANSWER)
    records = [TurnRecord(0, "m1", first), TurnRecord(1, "m2", follow_up)]
    marked = marked_copies(records)
    assert list(marked) == [answer_key("m2")]
    (copy,) = marked[answer_key("m2")]
    assert copy.caption.startswith("Marked on **coffee.png**")
