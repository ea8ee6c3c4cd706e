"""GET /ui after a short replay: the page lists the replayed campaigns; headless Chromium renders it."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest

from .app_fixtures import rcb_replay, rcb_serve


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium is needed (Debian package chromium; .ci/run installs it)")


def test_the_status_page_shows_the_replayed_campaigns(models, tmp_path):
    with rcb_serve(models.cbrl_model) as server:
        replayed = rcb_replay(server.url, models.market, tmp_path / "replay")
        assert replayed.exit_code == 0, replayed.output
        page = httpx.get(f"{server.url}/ui").text
        assert "episode-0" in page and "48 / 48" in page and "<svg" in page and server.url not in page
        shot = tmp_path / "ui.png"
        subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--screenshot={shot}",
                "--window-size=1100,700",
                f"{server.url}/ui",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a rendered page, not a blank one
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1100, 700)
