"""Headless Chromium for the browser peers (Selenium + a local chromedriver)."""
import shutil

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def start_browser():
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1000,640", "--disable-extensions"):
        options.add_argument(arg)
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if binary:
        options.binary_location = binary
    driver_path = shutil.which("chromedriver")
    # A local chromedriver: never let Selenium Manager download one.
    service = Service(executable_path=driver_path) if driver_path else Service()
    return webdriver.Chrome(options=options, service=service)


def page_state(driver):
    """The page's #messages and #status, for a failure report (never raises)."""
    from selenium.webdriver.common.by import By
    try:
        return (f"#messages: {driver.find_element(By.ID, 'messages').text!r} "
                f"#status: {driver.find_element(By.ID, 'status').text!r}")
    except Exception as e:  # noqa: BLE001
        return f"(page unreadable: {type(e).__name__})"
