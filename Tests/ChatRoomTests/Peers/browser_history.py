#!/usr/bin/env python3
"""Pages back through a room's history in the chat page, in headless Chromium (Selenium).

Usage: browser_history.py HTTP_URL ROOM COUNT PREFIX
The room already holds COUNT messages with the texts PREFIX0 ... PREFIX{COUNT-1}. The page joins
it, then the message list is scrolled to its top again and again: each time the page asks for the
next older page (`history` with `before`) and prepends it. Checks that all COUNT messages end up
shown once, in order, each with its time (HH:MM, the full date and time as its tooltip), that the
view stayed on the message that was at the top when a page was prepended, and that the page sent
exactly one request per older page (none while one was on its way, none after `next` was null).
Exits 0 on success, 1 on a failed check, 2 if the browser cannot start (with a reason on stderr).
"""
import re
import sys

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
    from chromium import page_state, start_browser
except ImportError:
    print("python3 module 'selenium' is not installed (pip install selenium)", file=sys.stderr)
    sys.exit(2)

SHOWN = """
return [...document.querySelectorAll('#messages .msg[data-id]')].map(d => {
  const t = d.querySelector('time');
  return { id: Number(d.dataset.id), text: d.textContent,
           hhmm: t ? t.dataset.hhmm : null, title: t ? t.title : null, iso: t ? t.dateTime : null,
           shown: t ? getComputedStyle(t, '::before').content : null };
});
"""

# Scrolls the list to its top; returns where the message at the top sits relative to the list.
SCROLL_TOP = """
const box = document.getElementById('messages');
const first = box.querySelector('.msg[data-id]');
box.scrollTop = 0;
box.dispatchEvent(new Event('scroll'));
return first ? [first.dataset.id, first.getBoundingClientRect().top - box.getBoundingClientRect().top] : null;
"""

OFFSET_OF = """
const box = document.getElementById('messages');
const el = box.querySelector('.msg[data-id="' + arguments[0] + '"]');
return el ? el.getBoundingClientRect().top - box.getBoundingClientRect().top : null;
"""


def fail(message, driver):
    print(f"{message}; {page_state(driver)}", file=sys.stderr)
    return 1


def main(url, room, count, prefix):
    try:
        d = start_browser()
    except Exception as e:  # noqa: BLE001
        print(f"cannot start headless chromium: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    try:
        # The bound only ends a failing run (a loaded 2-core machine, a ThreadSanitizer server).
        wait = WebDriverWait(d, 60)
        d.get(url)
        wait.until(EC.element_to_be_clickable((By.ID, "join")))
        d.find_element(By.ID, "room").clear()
        d.find_element(By.ID, "room").send_keys(room)
        d.find_element(By.ID, "user").send_keys("viewer")
        d.find_element(By.ID, "join").click()
        wait.until(lambda d: d.execute_script("return document.documentElement.dataset.lastId"))
        pages = 0
        while True:
            shown = d.execute_script(SHOWN)
            if d.execute_script("return document.documentElement.dataset.historyDone") == "1":
                break
            before = d.execute_script(SCROLL_TOP)
            if before is None:
                return fail("no message shown after the join", d)
            top_id, top_offset = before
            # The next page arrives: more messages shown, or the last (empty) answer.
            wait.until(lambda d: len(d.execute_script(SHOWN)) > len(shown)
                       or d.execute_script("return document.documentElement.dataset.historyDone") == "1")
            now = d.execute_script(SHOWN)
            if len(now) > len(shown):
                pages += 1
                offset = d.execute_script(OFFSET_OF, top_id)
                # The view stays on the message that was at the top (it was at the top, not
                # jumping to the new oldest one).
                if offset is None or abs(offset - top_offset) > 2:
                    return fail(f"message {top_id} moved from {top_offset} to {offset} px when a page was prepended", d)
            if pages > count:
                return fail("paging does not end", d)
        shown = d.execute_script(SHOWN)
        # A line's text is "user: text" (the time is drawn by CSS); the writer is another user.
        got = [m["text"].split(": ", 1)[1] if ": " in m["text"] else m["text"] for m in shown]
        if got != [f"{prefix}{i}" for i in range(count)]:
            return fail(f"messages shown {got[:5]}…{got[-5:]} ({len(got)}), expected {count} in order", d)
        ids = [m["id"] for m in shown]
        if ids != sorted(ids) or len(set(ids)) != len(ids):
            return fail("ids out of order or repeated", d)
        for m in shown:
            if not m["hhmm"] or not re.fullmatch(r"\d\d:\d\d", m["hhmm"]) or m["shown"] != f'"{m["hhmm"]}"':
                return fail(f"message {m['id']} shows no HH:MM time: {m}", d)
            if not m["title"] or not m["iso"]:
                return fail(f"message {m['id']} has no full date and time: {m}", d)
        requests = d.execute_script("return Number(document.documentElement.dataset.historyRequests || 0)")
        # 50 with the join, then pages of 50: one request each, the last one answered with next null.
        expected_requests = (count - 50 + 49) // 50
        if requests != expected_requests:
            return fail(f"{requests} history requests sent, expected {expected_requests}", d)
        # Scrolling to the top again asks for nothing more.
        d.execute_script(SCROLL_TOP)
        if d.execute_script("return Number(document.documentElement.dataset.historyRequests || 0)") != requests:
            return fail("a history request after the last page", d)
        print(f"ok: {len(shown)} messages in {requests} pages after the join, first {shown[0]['text']!r} "
              f"at {shown[0]['hhmm']} ({shown[0]['title']})")
        return 0
    except Exception as e:  # noqa: BLE001
        print(f"browser check failed: {type(e).__name__}: {e}; {page_state(d)}", file=sys.stderr)
        return 1
    finally:
        d.quit()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(64)
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
