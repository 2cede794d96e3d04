#!/usr/bin/env python3
"""The chat page with a token, in headless Chromium (Selenium + chromedriver).

Usage: browser_token.py HTTP_URL SECRET [LIFETIME_SECONDS]
Mints a 10-second (or LIFETIME_SECONDS) HS256 token for sub u1, name alice (mint_token.py), opens HTTP_URL#token=…,
checks the fragment left the address bar, joins without typing a name (the token's name is
taken), and has the refresh hook (window.switchboardChat.getToken, installed through DevTools
before the page's scripts run) hand over a long-lived token: the page must send `refresh`, get
`refreshed`, and still send and receive after the first token's exp.
Exits 0 on success, 1 on a failed check, 2 if the browser cannot start (with a reason on stderr).
"""
import json
import sys
import time

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
    from chromium import page_state, start_browser
except ImportError:
    print("python3 module 'selenium' is not installed (pip install selenium)", file=sys.stderr)
    sys.exit(2)
from mint_token import mint


def main(url, secret, lifetime):
    try:
        d = start_browser()
    except Exception as e:  # noqa: BLE001
        print(f"cannot start headless chromium: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    try:
        # The bound only ends a failing run (Chromium and a ThreadSanitizer server, 2 cores).
        wait = WebDriverWait(d, 60)
        later = mint(secret, "u1", "alice", 600)
        hook = "window.switchboardChat = { calls: 0, getToken: async () => { window.switchboardChat.calls += 1; return %s; } };"
        d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": hook % json.dumps(later)})
        first = mint(secret, "u1", "alice", lifetime)
        first_exp = json.loads(__import__("base64").urlsafe_b64decode(first.split(".")[1] + "==="))["exp"]
        d.get(url + "#token=" + first)
        wait.until(EC.element_to_be_clickable((By.ID, "join")))
        if d.execute_script("return location.hash") != "":
            print("the token is still in the address bar: " + d.current_url, file=sys.stderr)
            return 1
        d.find_element(By.ID, "room").clear()
        d.find_element(By.ID, "room").send_keys("lobby")
        d.find_element(By.ID, "join").click()   # no name typed: the token's
        wait.until(EC.text_to_be_present_in_element((By.ID, "presence"), "alice"))
        # At 80% of the token's lifetime the page asks the hook and sends refresh.
        wait.until(lambda d: d.execute_script("return document.documentElement.dataset.refreshes") == "1")
        if d.execute_script("return window.switchboardChat.calls") != 1:
            print("the hook was not called exactly once", file=sys.stderr)
            return 1
        # Past the first token's exp (what is checked is that the deadline moved).
        WebDriverWait(d, 60, poll_frequency=0.2).until(lambda _: time.time() > first_exp + 1)
        d.find_element(By.ID, "text").send_keys("after the first exp")
        d.find_element(By.ID, "send").click()
        wait.until(EC.text_to_be_present_in_element((By.ID, "messages"), "alice: after the first exp"))
        reconnects = d.execute_script("return document.documentElement.dataset.reconnects")
        if reconnects is not None:
            print(f"the page reconnected ({reconnects}): the refresh did not keep the connection", file=sys.stderr)
            return 1
        print("ok:", d.find_element(By.ID, "messages").text.replace("\n", " | "))
        return 0
    except Exception as e:  # noqa: BLE001
        print(f"browser check failed: {type(e).__name__}: {e}", file=sys.stderr)
        print(page_state(d), file=sys.stderr)
        return 1
    finally:
        d.quit()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 10))
