"""A study packet through a real browser: Debian's headless Chromium loads the offline HTML page,
a scripted rater answers it, the page downloads answers-<packet>.json, and study-ingest reads it."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.data.records import write_stories
from rlcw.recipes.study_export import StudyExportConfig
from rlcw.recipes.study_export import main as export_main
from rlcw.recipes.study_ingest import StudyIngestConfig
from rlcw.recipes.study_ingest import main as ingest_main
from rlcw.study import DIMENSIONS

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        pytest.skip("Debian chromium + chromium-driver are not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        opts.add_argument(flag)
    opts.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    yield driver, downloads
    driver.quit()


def wait_for(pattern: str, folder: Path, timeout: float = 20.0) -> Path:
    end = time.time() + timeout
    while time.time() < end:
        done = [p for p in folder.glob(pattern) if not p.name.endswith(".crdownload")]
        if done:
            return done[0]
        time.sleep(0.1)
    raise AssertionError(f"no {pattern} downloaded into {folder} within {timeout} s")


def test_packet_round_trip_through_chromium(tmp_path, browser):
    from selenium.webdriver.common.by import By

    driver, downloads = browser
    prompts = [f"A story about the {w} & the <moon>" for w in ("fox", "owl", "hare", "crow")]
    files = [
        write_stories(
            tmp_path / f"{s}.jsonl",
            [
                {"id": f"{s}{k}", "prompt": p, "story": f"{s.upper()} tale {k}.\nLine two.", "system": s}
                for k, p in enumerate(prompts)
            ],
        )
        for s in ("tuned", "base")
    ]
    summary = export_main(
        load_config(
            StudyExportConfig,
            None,
            [
                f"output_dir={tmp_path}",
                "run_name=exp",
                "design.attention_checks=1",
                f"data.stories=[{files[0]},{files[1]}]",
            ],
        )
    )
    key = json.loads(Path(summary["artifacts"]["key"]).read_text())
    ((packet_id, packet),) = key["packets"].items()  # 4 pairs + 1 check = one sitting of 5
    page = Path(summary["artifacts"]["html"]) / f"{packet_id}.html"

    driver.get(page.as_uri())
    assert "A story about the fox & the <moon>" in driver.find_element(By.ID, "items").text  # escaped, not markup
    driver.find_element(By.ID, "download").click()  # nothing answered yet: refused, no file
    assert "missing" in driver.find_element(By.ID, "status").text
    time.sleep(0.5)
    assert not list(downloads.iterdir())

    # a rater who prefers TUNED's story on every dimension and passes the attention check
    for item_id in packet["item_ids"]:
        section = driver.find_element(By.ID, f"item-{item_id}").text
        if "ATTENTION CHECK" in section:
            label = "B"
        else:
            label = "A" if section.index("TUNED tale") < section.index("BASE tale") else "B"
        for dim in DIMENSIONS:
            driver.find_element(By.ID, f"{item_id}-{dim}-{label}").click()
    driver.find_element(By.ID, f"{packet['item_ids'][0]}-comment").send_keys("liked the ending")
    driver.find_element(By.ID, "download").click()
    answers_file = wait_for("answers-*.json", downloads)
    data = json.loads(answers_file.read_text())
    assert data["packet_id"] == packet_id and len(data["answers"]) == 5
    assert data["answers"][0]["comment"] == "liked the ending"

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(answers_file, inbox)
    result = ingest_main(
        load_config(
            StudyIngestConfig,
            None,
            [
                f"output_dir={tmp_path}",
                "run_name=ing",
                f"key={summary['artifacts']['key']}",
                f"answers=[{inbox}]",
                "n_bootstrap=20",
            ],
        )
    )
    m = result["metrics"]
    assert m["judgements"] == 4 and m["raters"] == 1
    assert m["win_rate/tuned"] == 1.0 and m["win_rate/base"] == 0.0
