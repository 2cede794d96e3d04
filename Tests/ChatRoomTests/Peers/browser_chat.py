#!/usr/bin/env python3
"""Drives the chat page in two headless Chromium windows (Selenium + chromedriver).

Usage: browser_chat.py HTTP_URL SCREENSHOT_PATH
Opens the page twice, joins the same room as two users, sends from one, waits for the text in
the other's #messages (and for presence and the typing indicator), saves a screenshot.
Exits 0 on success, 1 on a failed check, 2 if the browser cannot start (with a reason on stderr).
"""
import os
import sys
import time

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
    from chromium import page_state, start_browser
except ImportError:
    print("python3 module 'selenium' is not installed (pip install selenium)", file=sys.stderr)
    sys.exit(2)


def main(url, screenshot):
    try:
        a = start_browser()
        b = start_browser()
    except Exception as e:  # noqa: BLE001
        print(f"cannot start headless chromium: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    try:
        # Waits for things that must happen; the bound only ends a failing run (two Chromiums
        # and a ThreadSanitizer build of the server share a loaded 2-core machine).
        wait_a, wait_b = WebDriverWait(a, 60), WebDriverWait(b, 60)
        for d, w, user in ((a, wait_a, "alice"), (b, wait_b, "bob")):
            d.get(url)
            w.until(EC.element_to_be_clickable((By.ID, "join")))
            # Chromium offers permessage-deflate; the chat-room accepts it by default, without
            # context takeover either way.
            negotiated = d.execute_script("return document.documentElement.dataset.wsExtensions")
            expected = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
            if negotiated != expected:
                print(f"negotiated Sec-WebSocket-Extensions {negotiated!r}, expected {expected!r}", file=sys.stderr)
                return 1
            d.find_element(By.ID, "room").clear()
            d.find_element(By.ID, "room").send_keys("lobby")
            d.find_element(By.ID, "user").send_keys(user)
            d.find_element(By.ID, "join").click()
            w.until(EC.text_to_be_present_in_element((By.ID, "presence"), user))
        # alice sees bob arrive in her presence list.
        wait_a.until(EC.text_to_be_present_in_element((By.ID, "presence"), "bob"))
        # typing indicator: bob types, alice sees it. The indicator is transient (bob's page
        # withdraws it after 3 s without input), so bob keeps typing — a space and its deletion,
        # the text stays the same — until alice has seen it, however slow this machine is.
        b.find_element(By.ID, "text").send_keys("hello from bob")

        def alice_sees_bob_typing(_):
            if "bob is typing" in a.find_element(By.ID, "typing").text:
                return True
            b.find_element(By.ID, "text").send_keys(" " + Keys.BACKSPACE)
            return False

        wait_a.until(alice_sees_bob_typing)
        b.find_element(By.ID, "send").click()
        wait_a.until(EC.text_to_be_present_in_element((By.ID, "messages"), "bob: hello from bob"))
        wait_b.until(EC.text_to_be_present_in_element((By.ID, "messages"), "bob: hello from bob"))
        a.find_element(By.ID, "text").send_keys("hi bob, alice here")
        a.find_element(By.ID, "send").click()
        wait_b.until(EC.text_to_be_present_in_element((By.ID, "messages"), "alice: hi bob, alice here"))
        wait_b.until(lambda d: d.find_element(By.ID, "typing").text == "")
        time.sleep(0.2)
        os.makedirs(os.path.dirname(screenshot), exist_ok=True)
        if not b.save_screenshot(screenshot):
            print("screenshot failed", file=sys.stderr)
            return 1
        print("ok: messages in bob's window:", b.find_element(By.ID, "messages").text.replace("\n", " | "),
              "| extensions:", negotiated)
        return 0
    except Exception as e:  # noqa: BLE001
        print(f"browser check failed: {type(e).__name__}: {e}", file=sys.stderr)
        for name, d in (("alice", a), ("bob", b)):
            print(f"{name} {page_state(d)}", file=sys.stderr)
        return 1
    finally:
        a.quit()
        b.quit()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
