#!/usr/bin/env python3
"""The chat page in headless Chromium across dropped connections, driven from stdin.

Usage: browser_resume.py HTTP_URL ROOM USER
Opens the page (through the test's TCP relay), joins ROOM as USER, prints "joined". Then reads
commands, one per line, and answers each on stdout:
  reconnects N  -> waits until the page has re-connected N times; prints "reconnected N"
  messages USER N -> waits until the page shows N messages from USER; prints "messages " and
                     the JSON list of their texts as shown (all of them, in page order)
  missed        -> prints "missed yes" or "missed no" (whether the page said messages were missed)
Exits 0 at end of input, 1 on a failed wait, 2 if the browser cannot start.
"""
import json
import sys

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
    from chromium import page_state, start_browser
except ImportError:
    print("python3 module 'selenium' is not installed (pip install selenium)", file=sys.stderr)
    sys.exit(2)

MESSAGES_FROM = """
const user = arguments[0];
return [...document.querySelectorAll('#messages .msg')]
  .filter(d => { const u = d.querySelector('.user'); return u && u.textContent === user; })
  .map(d => d.textContent.slice(user.length + 2));
"""


def main(url, room, user):
    try:
        d = start_browser()
    except Exception as e:  # noqa: BLE001
        print(f"cannot start headless chromium: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    # The bound only ends a failing run (a ThreadSanitizer server on a loaded 2-core machine).
    wait = WebDriverWait(d, 90)
    try:
        d.get(url)
        wait.until(EC.element_to_be_clickable((By.ID, "join")))
        d.find_element(By.ID, "room").clear()
        d.find_element(By.ID, "room").send_keys(room)
        d.find_element(By.ID, "user").send_keys(user)
        d.find_element(By.ID, "join").click()
        wait.until(EC.text_to_be_present_in_element((By.ID, "presence"), user))
        print("joined", flush=True)
        for line in sys.stdin:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "reconnects":
                n = int(parts[1])
                wait.until(lambda drv: int(drv.execute_script(
                    "return document.documentElement.dataset.reconnects || '0'")) >= n)
                print(f"reconnected {n}", flush=True)
            elif parts[0] == "messages":
                sender, n = parts[1], int(parts[2])
                wait.until(lambda drv: len(drv.execute_script(MESSAGES_FROM, sender)) >= n)
                print("messages " + json.dumps(d.execute_script(MESSAGES_FROM, sender)), flush=True)
            elif parts[0] == "missed":
                text = d.find_element(By.ID, "messages").text
                print("missed " + ("yes" if "earlier messages were missed" in text else "no"), flush=True)
        return 0
    except Exception as e:  # noqa: BLE001
        print(f"browser check failed: {type(e).__name__}: {e}", file=sys.stderr)
        print(page_state(d), file=sys.stderr)
        return 1
    finally:
        d.quit()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
