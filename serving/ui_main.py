"""Start Chainlit's command line (``chainlit run app.py ...``) on asyncio's own tasks.

Chainlit 2.12's CLI (``chainlit/cli/__init__.py``) calls ``nest_asyncio.apply()``
when it is imported, so that a running event loop can be entered again
(``loop.run_until_complete`` inside a coroutine; in Chainlit only
``WebsocketSession.get_config`` does that, for chat profiles with config
overrides, which this app does not have). That patch swaps asyncio's C
``Task`` and ``Future`` for their pure-Python twins for the whole process and
runs the loop's every iteration through a Python copy of ``_run_once``: every
await, every socket read and every websocket frame of every chat pays for it. In
a profile of the app answering first questions (``py-spy``, ``bench/bench_burst.py``),
the pure-Python ``Task.__step`` and ``_run_once`` frames sat under every stack.

This entry point makes ``nest_asyncio.apply`` a no-op before the CLI is imported,
and gives asyncio uvloop's event loop, which the CLI's ``asyncio.run`` then makes
(uvicorn parses HTTP with httptools when it is installed, as it is in
requirements.txt); then it runs the same CLI: the options, the environment
variables and the app are Chainlit's. A burst of 64 first questions
(``bench/bench_burst.py``, one session, 2026-12-02): added time to the first words
p50 +188 ms with the patch, +119 ms on C tasks, +92 ms with uvloop and httptools.
Remove the no-op when Chainlit's CLI no longer applies nest_asyncio
(``tests/test_ui_main.py`` fails then, as it does if the CLI moves the call).
Without it the loop is not re-entrant: ``chainlit run -w`` (reload on change) fails
to reload an app whose store exists (``backend/store/core.py``'s ``open_store``
checks the store with ``asyncio.run`` when the app is imported); launch.sh never
reloads.

Each UI process launch.sh starts gets a Chainlit app root of its own
(:func:`own_app_root`): Chainlit keeps a chat's uploads under ``<app root>/.files``
and removes that whole folder when its process stops (chainlit/server.py's
lifespan), so processes sharing one root would delete each other's uploads.

Usage (in the app's environment, from the app's folder):
``python -m serving.ui_main run app.py --headless --host 127.0.0.1 --port 8300``.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

MODULE = "serving.ui_main"
APP_FOLDER = Path(__file__).resolve().parents[1]
"""The app's folder (``app.py``, ``.chainlit/``, ``public/``, ``chainlit.md``)."""
SHARED_FOLDERS = (".chainlit", "public")
"""What Chainlit reads from its app root besides the welcome pages: its config and
translations, and the files it serves at ``/public``."""


def ui_command(host: str, port: int) -> list[str]:
    """The command line of the chat UI on ``host:port`` (headless), run by this python (the
    app's) from the app's folder, which holds this package."""
    run = [sys.executable, "-m", MODULE, "run", "app.py", "--headless"]
    return [*run, "--host", host, "--port", str(port)]


def own_app_root(folder: Path) -> dict[str, str]:
    """Make ``folder`` a Chainlit app root of one UI process; the environment that points
    Chainlit at it (``CHAINLIT_APP_ROOT``, read by chainlit/config.py).

    The folder links to the app folder's :data:`SHARED_FOLDERS` and holds copies of its
    welcome pages (``chainlit.md``, ``chainlit_<language>.md``: Chainlit takes a
    translated page only from inside its root, resolving links), so the process reads
    what it would from the app folder, while its uploads go to ``folder/.files``, which
    no other process removes. launch.sh makes it again before every start of the process
    (a restart too): a welcome page edited since is copied, a removed folder made again.

    Raises:
        OSError: the folder cannot be made or written, or something other than a link
            stands where a link goes.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name in SHARED_FOLDERS:
        link = folder / name
        if link.is_symlink():
            link.unlink()
        link.symlink_to(APP_FOLDER / name, target_is_directory=True)
    for page in folder.glob("chainlit*.md"):
        page.unlink()
    for page in APP_FOLDER.glob("chainlit*.md"):
        shutil.copyfile(page, folder / page.name)
    return {"CHAINLIT_APP_ROOT": str(folder.resolve())}


def _keep_asyncio(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Stands in for ``nest_asyncio.apply``: asyncio stays as it is."""


def main() -> None:
    """Chainlit's CLI with ``sys.argv``, on asyncio's C tasks and futures, and on uvloop
    where the app's python has it (an app python of the operator's, ``KIMI_APP_PYTHON``,
    may not: asyncio's own loop then)."""
    import nest_asyncio  # the app's environment's: not imported with ui_command

    nest_asyncio.apply = _keep_asyncio
    try:
        import uvloop
    except ImportError:
        pass
    else:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    from chainlit.cli import cli

    cli(prog_name="chainlit")


if __name__ == "__main__":
    main()
