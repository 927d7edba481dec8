"""The web page in a real Chromium: upload a photo, click *Derain*, see the before/after slider; again at another
strength."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import tiny_net
from ports import launched

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = importlib.import_module("derain.app")
    torch.manual_seed(0)
    demo = app.build_app(tiny_net(), app.PageSettings(warning=app.UNTRAINED_WARNING, quality="fast"))
    with launched(demo) as address:
        yield address


def test_upload_derain_and_see_the_result(url: str, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    photo = REPO / "datasets" / "examples" / "chelsea-rain.jpg"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url, wait_until="networkidle")
            page.locator("#photo input[type=file]").set_input_files(str(photo))
            page.locator("#photo img").first.wait_for(state="visible", timeout=30_000)  # upload preview
            status = page.locator("#status")
            sync_api.expect(status).to_contain_text(
                "expected about", timeout=30_000
            )  # Fast and Best, for this photo
            page.get_by_label("Best", exact=False).check()  # the page's default here is Fast
            page.locator("#derain-button").click()
            sync_api.expect(status).to_contain_text("Derained 451×300 pixels", timeout=60_000)
            sync_api.expect(status).to_contain_text("Best: self-ensemble of 4 passes")
            result_images = page.locator("#result img")
            sync_api.expect(result_images.first).to_be_visible()
            assert result_images.count() == 2  # before and after, under the slider
            download = page.locator("#download")
            sync_api.expect(download).to_contain_text("chelsea-rain-derained")
            href = download.locator("a").first.get_attribute("href")
            assert href is not None
            png = page.request.get(href)
            assert png.ok and png.body()[:8] == b"\x89PNG\r\n\x1a\n"
            strength = page.locator("#strength input[type=number]")
            strength.fill("1.5")
            strength.press("Enter")
            page.locator("#derain-button").click()
            sync_api.expect(status).to_contain_text(
                "Best: self-ensemble of 4 passes, strength 1.5", timeout=60_000
            )
            sync_api.expect(download).to_contain_text("chelsea-rain-derained-s1.5")
            page.screenshot(path=str(tmp_path / "derain-page.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "derain-page.png").stat().st_size > 10_000
