"""The page at / (transformer/serving/page.html) in a real headless browser: Debian's chromium and chromedriver,
driven by Selenium, against the real server. Type a sentence, get its translation, open the alignment and the
attention views; a screenshot is written to pytest's temporary folder (its path is printed).

Without the browser this test is skipped, saying why, except under CI (CI=true), where .ci/run installs it and its
absence is a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_client import Served  # noqa: E402
from tiny_checkpoint import build  # noqa: E402

pytestmark = pytest.mark.slow
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1100,900",
]


def _browser_or_reason() -> str | None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (the dev extra)")
    return f"needs {', '.join(missing)} (apt-get install chromium chromium-driver)" if missing else None


@pytest.fixture
def browser(tmp_path):
    reason = _browser_or_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the page's browser test: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def test_type_translate_and_open_the_alignment_and_attention_views(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    from transformer import Translator

    checkpoint = build(tmp_path)["checkpoint"]
    expected = Translator.from_checkpoint(checkpoint).translate(["the cat sat"])[0]
    assert expected  # a sentence whose translation has words to align
    served = Served(["--checkpoint", str(checkpoint)], tmp_path / "server.log")
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"http://127.0.0.1:{served.port}/")
        wait.until(ready.text_to_be_present_in_element((By.ID, "pair"), "xx"))
        browser.find_element(By.ID, "source").send_keys("the cat sat")
        browser.find_element(By.ID, "translate").click()
        wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#output .line")))
        assert browser.find_element(By.CSS_SELECTOR, "#output .line").text == expected
        browser.find_element(By.ID, "show-alignment").click()
        table = wait.until(ready.presence_of_element_located((By.ID, "alignment")))
        assert table.find_elements(By.CSS_SELECTOR, "td.link")  # at least one link drawn
        assert len(table.find_elements(By.CSS_SELECTOR, "tbody tr")) == len(expected.split())
        browser.find_element(By.ID, "show-attention").click()
        heat = wait.until(ready.presence_of_element_located((By.ID, "attention")))
        assert "attention over the source" in heat.text
        shot = tmp_path / "serve_page.png"
        browser.find_element(By.ID, "show-alignment").click()
        wait.until(ready.presence_of_element_located((By.ID, "alignment")))
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 0
        print(f"screenshot: {shot}")
        assert browser.find_element(By.ID, "status").text == ""
    finally:
        assert served.stop() == 0


def test_the_page_chooses_the_pair_among_several_and_shows_the_route(browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import Select, WebDriverWait
    from serve_client import in_process
    from test_serving_access import two_pairs

    from transformer.config import ServeConfig

    _, _, registry = two_pairs()  # es-en upper-cases, en-es reverses the words
    with in_process(registry, ServeConfig(batch_wait_ms=0)) as port:
        wait = WebDriverWait(browser, 30)
        browser.get(f"http://127.0.0.1:{port}/")
        wait.until(ready.text_to_be_present_in_element((By.ID, "to"), "English"))
        source, target = Select(browser.find_element(By.ID, "from")), Select(browser.find_element(By.ID, "to"))
        assert [o.text for o in source.options] == ["Detect the language", "Spanish (es)", "English (en)"]
        source.select_by_value("en")
        assert [o.text for o in target.options] == ["Spanish (es)"]
        browser.find_element(By.ID, "source").send_keys("the dog eats bread")
        browser.find_element(By.ID, "translate").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "output"), "bread eats dog the"))
        assert browser.find_element(By.ID, "route").text == "route: en \u2192 es"
        source.select_by_value("auto")
        browser.find_element(By.ID, "source").clear()
        browser.find_element(By.ID, "source").send_keys("el perro come pan y bebe agua")
        Select(browser.find_element(By.ID, "to")).select_by_value("en")
        browser.find_element(By.ID, "translate").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "output"), "EL PERRO COME PAN"))
        assert browser.find_element(By.ID, "route").text == "route: es \u2192 en"
