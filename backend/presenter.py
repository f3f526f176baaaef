"""Words and numbers people see around an answer: step titles, stats, notes.

Pure functions, so the Chainlit app stays wiring and these stay testable. Each takes
``tr``, the chat's :class:`backend.i18n.Translator` (English by default); the
words themselves are msgids of the catalogue (``backend/locale``).
"""

from __future__ import annotations

from backend.i18n import ENGLISH, Message, Translator, msg
from backend.safety import escape_markdown
from backend.timings import StepEnd as StepEnd  # the step's words live with its numbers
from backend.timings import thought_label as thought_label


def in_markdown(value: str, tr: Translator = ENGLISH) -> str:
    """``value`` in ``tr``'s language for a line of markdown, with what is not the app's
    escaped (:func:`backend.safety.escape_markdown`): a :class:`backend.i18n.Message`
    keeps its own words and markup, its parameters (file names, a server's detail, model
    text) are escaped, a nested message's likewise; any other text is escaped whole.

    E.g. the note for a file named ``![x](http://h/a).png`` shows that name, not an image.
    """
    if not isinstance(value, Message):
        return escape_markdown(value)
    params = {k: in_markdown(v, tr) if isinstance(v, str) else v for k, v in value.params.items()}
    return tr(value.msgid, **params)


THINKING_LABEL = msg("Thinking…")
"""Title of a reasoning step while it streams (render with the chat's translator)."""


RETRY_LABEL = msg("Retry")
REGENERATE_LABEL = msg("Regenerate")
MORE_TOKENS_LABEL = msg("Retry with more tokens")
SEND_ANYWAY_LABEL = msg("Send without them")
"""Button labels (render with the chat's translator)."""

ALREADY_SENT_NOTE = msg("That message was already sent or replaced.")
NOT_SAVED_NOTE = msg(
    "This chat is not being saved for now: the app cannot write to its database. "
    "Go on: what is said here is kept and saved once the database can be written again."
)
SAVED_AGAIN_NOTE = msg(
    "The database can be written again: this chat is saved, what was said meanwhile included."
)
TURN_GONE_NOTE = msg("That turn is no longer part of the conversation; ask again below.")


def cut_off_note(max_tokens: int, *, in_reasoning: bool, tr: Translator = ENGLISH) -> str:
    """Say that max tokens ran out, and where."""
    if in_reasoning:
        return tr(
            "The answer was cut off: the model used all {max_tokens} tokens while still "
            "thinking, before any answer. Retry with more tokens, or ask a narrower question.",
            max_tokens=max_tokens,
        )
    return tr(
        "The answer was cut off: the model used all {max_tokens} tokens before the answer "
        "ended. Retry with more tokens, or ask a narrower question.",
        max_tokens=max_tokens,
    )


def too_long_note(chars: int, tr: Translator = ENGLISH) -> str:
    """Say that the app cut a stream at ``chars`` characters (``Done.cut_at_chars``)."""
    return tr(
        "The answer was cut here, at {chars:,} characters, far longer than any real answer: "
        "the app stopped reading it and the model server stopped writing it.",
        chars=chars,
    )


def stopped_note(answered: bool, tr: Translator = ENGLISH) -> str:
    """The note Stop leaves under the answer: before its end (``answered``: some of the
    answer came) or while thinking."""
    if answered:
        return tr("*Stopped before the end of the answer.*")
    return tr("*Stopped while thinking: the reasoning so far is kept above.*")


def incomplete_note(tr: Translator = ENGLISH) -> str:
    """The note under the partial answer of a stream that broke."""
    return tr("*Incomplete: the reply broke off here (see below).*")


def not_started_note(seconds: float, queued: int | None, tr: Translator = ENGLISH) -> str:
    """Said while the server has taken the request but sent no text yet."""
    if queued:
        return tr(
            "The model server has not started answering yet ({seconds:.0f} s). "
            "The server has {queued} request(s) queued. Stop works at any time.",
            seconds=seconds,
            queued=queued,
        )
    return tr(
        "The model server has not started answering yet ({seconds:.0f} s). Stop works at any time.",
        seconds=seconds,
    )


def server_away_note(seconds: float, tr: Translator = ENGLISH) -> str:
    """Said, and updated, while a sent message waits for a model server that cannot be
    reached or is still loading (``seconds`` so far); it is answered once the server is back."""
    return tr(
        "The model server is not answering right now: it may be restarting ({seconds:.0f} s). "
        "Your message will be answered as soon as it is back. Stop works at any time.",
        seconds=seconds,
    )


def connecting_note(tr: Translator = ENGLISH) -> str:
    """Said at chat start while the model server's models are not known yet."""
    return tr("**Connecting to the model server…** *This note goes away when it answers.*")


def waiting_note(problem: str, tr: Translator = ENGLISH) -> str:
    """Said while the model server is unreachable or loading; ``problem`` says which
    (a :class:`backend.i18n.Message`, e.g. the error's, is translated)."""
    return tr(
        "**Waiting for the model server.** {problem}\n\n"
        "*This note keeps up to date and goes away when the server is ready.*",
        problem=in_markdown(problem, tr),
    )


def ready_note(label: str, tr: Translator = ENGLISH) -> str:
    """Said once the model server answers (plain text: a toast)."""
    return tr("The model server is ready ({label}). Ask away.", label=label)


def model_switched_note(label: str, tr: Translator = ENGLISH) -> str:
    """Said where the person picked another served model (``label``, e.g. "Kimi-VL
    Instruct"): the chat goes on, history and all."""
    return tr(
        "{model} answers from here on, with the conversation so far.",
        model=escape_markdown(label),
    )


def switch_refused_note(problem: str, tr: Translator = ENGLISH) -> str:
    """Said when the picked model cannot answer (``problem``: a ChatError's sentence):
    the message was not sent, its text is back in the message box."""
    return tr(
        "{problem} Your text is back in the message box: send it again, or pick another model.",
        problem=in_markdown(problem, tr),
    )


DEV_MODE_BANNER = msg(
    "Dev mode: the server runs a tiny model with random weights on the CPU. "
    "Answers are noise, shaped like the Thinking model's (reasoning, then answer); "
    "dev mode exists to exercise the whole path."
)
"""The toast at chat start in dev mode (render with the chat's translator)."""

DEV_STATS_SUFFIX = msg("dev model: the text is noise")
"""Added to the stats line in dev mode."""


def rerun_note(text: str, later_turns: int, tr: Translator = ENGLISH) -> str:
    """Said when an older turn is answered again: which one, and where its later ones are."""
    quoted = text if len(text) <= 60 else text[:57] + "…"
    if later_turns:
        return tr(
            "Answering again: “{quoted}”, as a new version. The {later_turns} later turn(s) "
            "stay with the earlier version.",
            quoted=escape_markdown(quoted),
            later_turns=later_turns,
        )
    return tr("Answering again: “{quoted}”.", quoted=escape_markdown(quoted))


def no_more_tokens_note(max_tokens: int, max_model_len: int, tr: Translator = ENGLISH) -> str:
    """Said when a cut-off answer cannot get more tokens: why."""
    return tr(
        "More tokens cannot fit: with every older turn left out, this message leaves "
        "{max_tokens} tokens for the answer in the model's {max_model_len}-token context. "
        "Ask a narrower question or start a new chat.",
        max_tokens=max_tokens,
        max_model_len=max_model_len,
    )


def upload_refusal(problem: str, name: str, tr: Translator = ENGLISH) -> str:
    """Why an upload is refused, as plain text after the page's "Failed to upload
    <name>:" (Chainlit's words): ``problem`` (a file's :class:`backend.i18n.Message`,
    which starts with the file's name) in ``tr``'s language, without that name."""
    said = tr.text(problem)
    for separator in (": ", "："):
        said = said.removeprefix(name + separator)
    return said


def unusable_files_note(
    problems: list[str], can_send: bool, text_back: bool = False, tr: Translator = ENGLISH
) -> str:
    """Name each file that could not be used, and say what the person can do now.

    ``can_send``: something is left to send (text or usable files), so the note offers
    to send the message without the refused files. ``text_back``: the message's text
    was put back in the message box, so attaching other files and sending again is real.
    """
    lines = "\n".join(f"- {in_markdown(problem, tr)}" for problem in problems)
    if text_back:
        how = tr(
            "Your text is back in the message box: attach other files and send it again, "
            "or send this message without them."
        )
    elif can_send:
        how = tr("Attach other files and send again, or send this message without them.")
    else:
        how = tr("Attach other files and send again.")
    return tr("Some files could not be used:") + f"\n{lines}\n\n{how}"
