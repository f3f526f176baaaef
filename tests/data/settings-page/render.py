"""Render settings.html into the starter's screenshot ``public/samples/settings.png``.

Run from the repository root: ``python tests/data/settings-page/render.py``. It uses
Debian's chromium through Playwright, as the browser tests do, at 1280x800 and a
device scale factor of 1, copies the result to ``tests/data/settings.png``, and
prints the controls' centres and boxes as fractions of the page (what the scripted
grounding answers in tests/fakes/kimi_server.py use).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import ViewportSize, sync_playwright

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[2] / "public" / "samples" / "settings.png"
TEST_COPY = HERE.parent / "settings.png"
SIZE: ViewportSize = {"width": 1280, "height": 800}
CONTROLS = ("dark-mode", "night-light", "brightness", "text-size", "save", "cancel")


def main() -> None:
    """Write the screenshot and print where each control is."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        page = browser.new_page(viewport=SIZE, device_scale_factor=1)
        page.goto((HERE / "settings.html").as_uri())
        page.screenshot(path=str(OUT))
        for control in CONTROLS:
            box = page.locator(f"#{control}").bounding_box()
            assert box is not None
            x, y, w, h = box["x"], box["y"], box["width"], box["height"]
            centre = ((x + w / 2) / SIZE["width"], (y + h / 2) / SIZE["height"])
            corners = (
                x / SIZE["width"],
                y / SIZE["height"],
                (x + w) / SIZE["width"],
                (y + h) / SIZE["height"],
            )
            print(
                f"{control}: centre ({centre[0]:.3f}, {centre[1]:.3f}) "
                f"box [{', '.join(f'{c:.3f}' for c in corners)}] "
                f"pixels [{x:.0f}, {y:.0f}, {x + w:.0f}, {y + h:.0f}]"
            )
        browser.close()
    shutil.copyfile(OUT, TEST_COPY)
    print(f"wrote {OUT} and {TEST_COPY}")


if __name__ == "__main__":
    main()
