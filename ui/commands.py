"""The composer's action buttons: the live server panel and Export.

They are offered to the page as buttons of the message box (``ui/bridge.py``) and in the
"/" list (Chainlit's commands); a click or a pick runs the action in the chat, outside
its transcript: never sent as a message to the model.
"""

from __future__ import annotations

from backend.i18n import in_any_language
from backend.turn_runner import TurnRunner
from ui import bridge, history, server_panel
from ui.language import session_translator


async def offer() -> None:
    """Send the page its action buttons and its own words (``ui/bridge.py``)."""
    await bridge.offer_actions(
        {"server_panel": server_panel.command(), "export": history.export_command()}
    )
    await bridge.send_strings(session_translator())


def of_command(command: str | None) -> bridge.Action | None:
    """The action of a composer command, in any language (None: not one of them)."""
    if in_any_language(server_panel.COMMAND, command):
        return "server_panel"
    if in_any_language(history.EXPORT_COMMAND, command):
        return "export"
    return None


async def run(action: bridge.Action, turns: TurnRunner) -> None:
    """Run ``action`` in the chat whose turns ``turns`` runs."""
    if action == "server_panel":
        await server_panel.toggle_panel()
    else:
        await history.send_export(turns)
