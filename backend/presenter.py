"""Words and numbers people see around an answer: step titles, stats, notes.

Pure functions, so the Chainlit app stays wiring and these stay testable.
"""

from __future__ import annotations

from typing import Literal

from backend.events import Done

THINKING_LABEL = "Thinking…"


StepEnd = Literal["done", "stopped", "failed"]
"""How a reasoning step ended: the answer followed, Stop was pressed, or an error."""


def thought_label(seconds: float, ended: StepEnd = "done") -> str:
    """Title of a finished reasoning step, e.g. ``"Thought for 12.3s"``.

    ``"stopped"`` adds "(stopped)" (the person pressed Stop); ``"failed"`` adds
    "(interrupted by an error)", explained in the message below it.
    """
    label = f"Thought for {seconds:.1f}s"
    if ended == "stopped":
        return f"{label} (stopped)"
    if ended == "failed":
        return f"{label} (interrupted by an error)"
    return label


def stats_line(done: Done) -> str:
    """One compact line under an answer: TTFT, thinking time, tokens, tokens/s.

    Example: ``"TTFT 0.41 s · thought 12.3 s · 512 tokens · 48.2 tokens/s"``;
    parts the server did not report are left out.
    """
    parts = []
    if done.ttft_s is not None:
        parts.append(f"TTFT {done.ttft_s:.2f} s")
    if done.reasoning_s is not None:
        parts.append(f"thought {done.reasoning_s:.1f} s")
    if done.usage is not None:
        parts.append(f"{done.usage.completion_tokens} tokens")
    rate = done.tokens_per_s
    if rate is not None:
        parts.append(f"{rate:.1f} tokens/s")
    parts.append(f"total {done.elapsed_s:.1f} s")
    return " · ".join(parts)


def cut_off_note(max_tokens: int, *, in_reasoning: bool) -> str:
    """Say that max tokens ran out, and where."""
    where = "while still thinking, before any answer" if in_reasoning else "before the answer ended"
    return (
        f"The answer was cut off: the model used all {max_tokens} tokens {where}. "
        "Retry with more tokens, or ask a narrower question."
    )


def stopped_note(partial_answer: str) -> str:
    """The message left by Stop: the partial answer, if any, marked as stopped."""
    if partial_answer:
        return f"{partial_answer}\n\n*■ Stopped before the end of the answer.*"
    return "*■ Stopped while thinking: the reasoning so far is kept above.*"


def incomplete_note(partial_answer: str) -> str:
    """The partial answer of a stream that broke, marked as incomplete."""
    mark = "*⚠️ Incomplete: the reply broke off here (see below).*"
    return f"{partial_answer}\n\n{mark}" if partial_answer else mark


def not_started_note(seconds: float, queued: int | None) -> str:
    """Said while the server has taken the request but sent no text yet."""
    queue = ""
    if queued:
        queue = f" The server has {queued} request(s) queued."
    return (
        f"⏳ The model server has not started answering yet ({seconds:.0f} s).{queue} "
        "Stop works at any time."
    )


def connecting_note() -> str:
    """Said at chat start while the model server's models are not known yet."""
    return "**Connecting to the model server…** *This message changes when it answers.*"


def waiting_note(problem: str) -> str:
    """Said while the model server is unreachable or loading; ``problem`` says which."""
    return (
        f"**Waiting for the model server.** {problem}\n\n"
        "*This message changes when the server is ready.*"
    )


def ready_note(label: str) -> str:
    """Said once the model server answers."""
    return f"✓ **The model server is ready** ({label}). Ask away."


DEV_MODE_BANNER = (
    "Dev mode: the server runs a tiny model with random weights on the CPU. "
    "Answers are noise, shaped like the Thinking model's (reasoning, then answer); "
    "dev mode exists to exercise the whole path."
)


def rerun_note(text: str, later_turns: int) -> str:
    """Said when an older turn is answered again: which one, and what became of later ones."""
    quoted = text if len(text) <= 60 else text[:57] + "…"
    later = (
        f" The {later_turns} later turn(s) above are no longer part of what the model sees."
        if later_turns
        else ""
    )
    return f"↻ Answering again: “{quoted}”.{later}"


def no_more_tokens_note(max_tokens: int, max_model_len: int) -> str:
    """Said when a cut-off answer cannot get more tokens: why."""
    return (
        f"More tokens cannot fit: with every older turn left out, this message leaves "
        f"{max_tokens} tokens for the answer in the model's {max_model_len}-token context. "
        "Ask a narrower question or start a new chat."
    )


def unusable_files_note(problems: list[str], can_send: bool) -> str:
    """Name each file that could not be used, and say the message is kept.

    ``can_send``: something is left to send (text or usable files), so the note
    offers to send it without the refused files.
    """
    lines = "\n".join(f"- {problem}" for problem in problems)
    how = ", or send it without them." if can_send else "."
    return (
        f"⚠️ Some files could not be used:\n{lines}\n\n"
        f"Your message is kept: attach other files and send again{how}"
    )
