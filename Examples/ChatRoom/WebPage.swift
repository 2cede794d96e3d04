/// The browser client served at `GET /`: self-contained HTML, CSS and JS (no CDN). It opens a
/// WebSocket to `/v1/ws` on the same host, passing `?token=` through from the page URL, or the
/// token of its URL fragment (`#token=…`, removed from the address bar at once, so that it is
/// neither bookmarked nor shared with the URL). With a token, the name field may stay empty (the
/// server takes the token's name), and the page refreshes the token in-band at 80% of its
/// lifetime through the hook an embedding page sets: `window.switchboardChat.getToken`, an
/// async function returning a new token (docs/chat-protocol.md, "Tokens"). When the
/// connection drops it reconnects with backoff (0.25 s doubling to 5 s, with jitter) and re-joins
/// its room with `since` (the last message id it showed), so nothing is lost or shown twice, and
/// with the `rejoinKey` of its last `presence`, so it takes its own stale presence over.
/// Each message shows its time (local `HH:MM`; the full date and time in its tooltip). Scrolled
/// to the top of the message list, it asks for the next older page (`history` with `before`: the
/// oldest id shown), one request at a time, prepends it keeping the scroll position, and stops
/// once a page's `next` is null.
enum WebPage {
    static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Switchboard chat</title>
<style>
  :root { --bg:#f4f5f7; --card:#fff; --ink:#1d2433; --muted:#6b7385; --accent:#3563e9; --err:#c62828; }
  * { box-sizing: border-box; }
  body { margin:0; font:15px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; background:var(--bg); color:var(--ink); }
  header { padding:12px 20px; background:var(--ink); color:#fff; display:flex; gap:12px; align-items:center; flex-wrap:wrap; }
  header h1 { font-size:17px; margin:0 12px 0 0; }
  header input { padding:6px 8px; border-radius:6px; border:0; width:140px; }
  button { padding:6px 14px; border-radius:6px; border:0; background:var(--accent); color:#fff; font-weight:600; cursor:pointer; }
  button:disabled { opacity:.5; cursor:default; }
  #status { margin-left:auto; font-size:13px; color:#c9d1e3; }
  main { display:grid; grid-template-columns: 1fr 200px; gap:16px; padding:16px 20px; height:calc(100vh - 58px); }
  .card { background:var(--card); border-radius:10px; box-shadow:0 1px 3px rgba(0,0,0,.08); padding:12px; min-height:0; }
  #chat { display:flex; flex-direction:column; }
  #messages { flex:1; overflow-y:auto; padding:4px; }
  .msg { padding:3px 0; word-wrap:break-word; }
  .msg .user { font-weight:700; color:var(--accent); }
  /* The time is drawn from data-hhmm: shown, but not in the line's text ("user: text"). */
  .msg time { color:var(--muted); font-size:12px; margin-right:6px; font-variant-numeric:tabular-nums; }
  .msg time::before { content:attr(data-hhmm); }
  .sys { color:var(--muted); font-style:italic; }
  .err { color:var(--err); }
  #typing { height:20px; font-size:13px; color:var(--muted); }
  form { display:flex; gap:8px; }
  #text { flex:1; padding:8px; border:1px solid #ccd2de; border-radius:6px; }
  #presence { list-style:none; margin:0; padding:0; }
  #presence li { padding:3px 0; } #presence li::before { content:"● "; color:#2e9d4f; }
  h2 { font-size:13px; text-transform:uppercase; color:var(--muted); margin:0 0 8px; }
</style>
</head>
<body>
<header>
  <h1>Switchboard chat</h1>
  <label>Room <input id="room" value="general" maxlength="64"></label>
  <label>Name <input id="user" placeholder="your name" maxlength="64"></label>
  <button id="join">Join</button>
  <span id="status">connecting…</span>
</header>
<main>
  <section id="chat" class="card">
    <div id="messages" aria-live="polite"></div>
    <div id="typing"></div>
    <form id="composer">
      <input id="text" placeholder="Message" autocomplete="off" maxlength="2000" disabled>
      <button id="send" type="submit" disabled>Send</button>
    </form>
  </section>
  <aside class="card"><h2>In this room</h2><ul id="presence"></ul></aside>
</main>
<script>
(() => {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const fragment = new URLSearchParams(location.hash.slice(1));
  // A token in the fragment never reaches a server with the page request; take it out of the
  // address bar (and history) before anything else.
  let token = fragment.get("token") || params.get("token");
  if (fragment.has("token")) history.replaceState(null, "", location.pathname + location.search);
  // The refresh hook: the embedding page sets switchboardChat.getToken = async () => newToken.
  const hook = window.switchboardChat = window.switchboardChat || {};
  let refreshTimer = null;
  function wsURL() {
    return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws" +
           (token ? "?token=" + encodeURIComponent(token) : "");
  }
  // The token's claims, unverified (the server verifies): for the name and the expiry.
  function claims(t) {
    try {
      const b64 = t.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      const bytes = Uint8Array.from(atob(b64 + "===".slice((b64.length + 3) % 4)), (c) => c.charCodeAt(0));
      const c = JSON.parse(new TextDecoder().decode(bytes));
      return c && typeof c === "object" ? c : {};
    } catch (e) { return {}; }
  }
  function tokenName() { const c = token ? claims(token) : {}; return typeof c.name === "string" ? c.name : (typeof c.sub === "string" ? c.sub : null); }
  // Asks the hook for a new token at 80% of the current one's lifetime (from now to exp, Unix
  // seconds); without a hook nothing is refreshed and the server closes at expiry (4001).
  function scheduleRefresh(exp) {
    clearTimeout(refreshTimer);
    if (typeof exp !== "number") return;
    document.documentElement.dataset.tokenExp = String(exp);
    const wait = Math.max(0, (exp * 1000 - Date.now()) * 0.8);
    refreshTimer = setTimeout(refreshToken, wait);
  }
  async function refreshToken() {
    if (typeof hook.getToken !== "function") return;
    try {
      const next = await hook.getToken();
      if (typeof next !== "string" || !next) return;
      token = next;
      send({ type: "refresh", token: next });
    } catch (e) {
      line("err", [["", "! could not get a new token: " + e]]);
    }
  }
  let ws = null, room = null, me = null, seen = new Set(), users = [], typers = new Map(), typingSent = false, typingTimer = null;
  // The last message id shown (resume point), the key of our presence (from the server's
  // presence answer: proves the name is ours on a re-join), and the reconnection backoff.
  let lastId = null, rejoinKey = null, attempt = 0;
  // Paging back: the oldest message id shown, the `before` of the next older page (from the
  // last history's `next`; null: nothing older; undefined: not known yet), one request at a time.
  let oldestId = null, nextBefore = undefined, loadingOlder = false;

  function status(text) { $("status").textContent = text; }
  function element(cls, parts) {
    const div = document.createElement("div");
    div.className = "msg " + cls;
    for (const [c, t] of parts) { const s = document.createElement("span"); if (c) s.className = c; s.textContent = t; div.appendChild(s); }
    return div;
  }
  function line(cls, parts) {
    $("messages").appendChild(element(cls, parts));
    $("messages").scrollTop = $("messages").scrollHeight;
  }
  const pad = (n) => String(n).padStart(2, "0");
  // A message's line: its time (local HH:MM, the full date and time as the tooltip), user, text.
  function messageElement(m) {
    const div = element("", [["user", m.user], ["", ": " + m.text]]);
    div.dataset.id = String(m.id);
    if (typeof m.ts === "number") {
      const d = new Date(m.ts), t = document.createElement("time");
      t.dateTime = d.toISOString();
      t.dataset.hhmm = pad(d.getHours()) + ":" + pad(d.getMinutes());
      t.title = d.toLocaleString();
      div.prepend(t);
    }
    return div;
  }
  function noteIds(m) {
    seen.add(m.id);
    if (lastId === null || m.id > lastId) lastId = m.id;
    if (oldestId === null || m.id < oldestId) oldestId = m.id;
    document.documentElement.dataset.lastId = String(lastId);
    document.documentElement.dataset.oldestId = String(oldestId);
  }
  function showMessage(m) {
    if (m.id != null) {
      if (seen.has(m.id)) return;
      // Older than everything shown (a page arriving late): in its place at the top.
      if (oldestId !== null && m.id < oldestId) return prependMessages([m]);
      noteIds(m);
      $("messages").appendChild(messageElement(m));
      $("messages").scrollTop = $("messages").scrollHeight;
      return;
    }
    line("", [["user", m.user], ["", ": " + m.text]]);
  }
  // Older messages (oldest first) above what is shown, the view staying where it was.
  function prependMessages(list) {
    const box = $("messages"), fromBottom = box.scrollHeight - box.scrollTop;
    const fresh = list.filter((m) => m.id != null && !seen.has(m.id));
    if (fresh.length === 0) return;
    const frag = document.createDocumentFragment();
    for (const m of fresh) { noteIds(m); frag.appendChild(messageElement(m)); }
    // Above the oldest message shown (lines before it, such as "you joined", stay on top).
    box.insertBefore(frag, box.querySelector(".msg[data-id]") || null);
    box.scrollTop = box.scrollHeight - fromBottom;
  }
  // Asks for the page before the oldest message shown, unless one is on its way or none is left.
  function loadOlder() {
    if (!room || loadingOlder || nextBefore == null || !ws || ws.readyState !== WebSocket.OPEN) return;
    loadingOlder = true;
    document.documentElement.dataset.historyRequests = String(Number(document.documentElement.dataset.historyRequests || 0) + 1);
    send({ type: "history", room, before: oldestId !== null && oldestId < nextBefore ? oldestId : nextBefore, limit: 50 });
  }
  function olderKnown(next) {
    nextBefore = next; loadingOlder = false;
    document.documentElement.dataset.historyDone = next === null ? "1" : "";
    // A list too short to scroll cannot be scrolled to the top: fetch until it can (or all is shown).
    const box = $("messages");
    if (next !== null && box.scrollHeight <= box.clientHeight) loadOlder();
  }
  function renderPresence() {
    const ul = $("presence"); ul.textContent = "";
    for (const u of users) { const li = document.createElement("li"); li.textContent = u; ul.appendChild(li); }
  }
  function renderTyping() {
    const names = [...typers.keys()];
    $("typing").textContent = names.length === 0 ? "" :
      names.join(", ") + (names.length === 1 ? " is typing…" : " are typing…");
  }
  function send(obj) { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(obj) + "\n"); }

  function handle(ev) {
    if (ev.room && room && ev.room !== room && ev.type !== "error") return;
    switch (ev.type) {
      case "message": showMessage(ev); typers.delete(ev.user); renderTyping(); break;
      case "history":
        if (ev.complete === false) line("sys", [["", "earlier messages were missed (not all are kept)"]]);
        // A page from paging back (older than all shown), or the join's newest messages.
        if (oldestId !== null && ev.messages.length > 0 && ev.messages[ev.messages.length - 1].id < oldestId) {
          prependMessages(ev.messages);
        } else {
          for (const m of ev.messages) showMessage(m);
        }
        // `next` (a join's or a page's history): where the next older page starts.
        if ("next" in ev) olderKnown(ev.next);
        break;
      case "presence":
        users = ev.users.slice(); renderPresence();
        if (ev.rejoinKey) rejoinKey = ev.rejoinKey;
        break;
      case "join":
        if (ev.user !== me) { users.push(ev.user); renderPresence(); }
        line("sys", [["", ev.user === me ? "you joined " + ev.room + " as " + me : ev.user + " joined"]]); break;
      case "leave":
        users = users.filter((u) => u !== ev.user); renderPresence(); typers.delete(ev.user); renderTyping();
        line("sys", [["", ev.user + " left"]]); break;
      case "typing":
        clearTimeout(typers.get(ev.user));
        if (ev.isTyping) typers.set(ev.user, setTimeout(() => { typers.delete(ev.user); renderTyping(); }, 6000));
        else typers.delete(ev.user);
        renderTyping(); break;
      case "refreshed":
        document.documentElement.dataset.refreshes = String(Number(document.documentElement.dataset.refreshes || 0) + 1);
        scheduleRefresh(ev.exp);
        break;
      case "error":
        line("err", [["", "! " + ev.error.message]]);
        // Possibly the answer to a page request (rate limited, storage unavailable): the next
        // scroll to the top asks again.
        loadingOlder = false;
        if (["name_taken", "invalid_user", "invalid_room", "forbidden", "room_forbidden"].includes(ev.error.code)) {
          room = null; me = null; setJoined(false);
        }
        break;
    }
  }
  function setJoined(on) { $("text").disabled = !on; $("send").disabled = !on; if (on) $("text").focus(); }

  function connect() {
    status("connecting…");
    ws = new WebSocket(wsURL());
    let buffer = "";
    ws.onopen = () => {
      // What the handshake negotiated (e.g. permessage-deflate), for the curious and for tests.
      document.documentElement.dataset.wsExtensions = ws.extensions;
      status(ws.extensions ? "connected (compressed)" : "connected"); $("join").disabled = false;
      attempt = 0;
      if (token) scheduleRefresh(claims(token).exp);
      if (room) {
        // A re-join: the server sends what was missed after lastId and, with our key, replaces
        // our stale presence.
        const rejoin = { type: "join", room, since: lastId === null ? 0 : lastId };
        if (!token) rejoin.user = me;
        if (rejoinKey) rejoin.rejoinKey = rejoinKey;
        send(rejoin);
        setJoined(true);
        document.documentElement.dataset.reconnects = String(Number(document.documentElement.dataset.reconnects || 0) + 1);
      }
    };
    ws.onmessage = (e) => {
      buffer += e.data;
      let i;
      while ((i = buffer.indexOf("\n")) >= 0) {
        const l = buffer.slice(0, i); buffer = buffer.slice(i + 1);
        if (!l.trim()) continue;
        try { handle(JSON.parse(l)); } catch (err) { console.error(err, l); }
      }
    };
    ws.onclose = (e) => {
      $("join").disabled = true; setJoined(false); clearTimeout(refreshTimer);
      loadingOlder = false;
      attempt += 1;
      const delay = Math.min(5000, 250 * Math.pow(2, attempt - 1)) * (0.5 + Math.random() / 2);
      status("disconnected (" + e.code + (e.reason ? " " + e.reason : "") + "); reconnecting in " +
             (delay / 1000).toFixed(1) + " s");
      // Token expired (4001): a new one from the hook first, if there is a hook.
      setTimeout(async () => {
        if (e.code === 4001 && typeof hook.getToken === "function") {
          try { const next = await hook.getToken(); if (typeof next === "string" && next) token = next; } catch (err) {}
        }
        connect();
      }, delay);
    };
  }

  $("join").addEventListener("click", () => {
    const r = $("room").value.trim(), u = $("user").value.trim() || (token ? tokenName() : "");
    if (!r || !u) { line("err", [["", "! enter a room and a name"]]); return; }
    if (room) send({ type: "leave", room });
    room = r; me = u; seen = new Set(); lastId = null; rejoinKey = null; users = []; typers.clear();
    oldestId = null; nextBefore = undefined; loadingOlder = false;
    $("messages").textContent = ""; renderPresence(); renderTyping();
    // With a token the server takes the token's name: a different one would be refused.
    const join = { type: "join", room: r };
    if (!token || $("user").value.trim()) join.user = u;
    send(join);
    setJoined(true);
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const t = $("text").value;
    if (!room || !t.trim()) return;
    send({ type: "message", room, text: t });
    $("text").value = "";
    if (typingSent) { typingSent = false; send({ type: "typing", room, isTyping: false }); }
  });
  $("text").addEventListener("input", () => {
    if (!room) return;
    if (!typingSent) { typingSent = true; send({ type: "typing", room, isTyping: true }); }
    clearTimeout(typingTimer);
    typingTimer = setTimeout(() => { typingSent = false; send({ type: "typing", room, isTyping: false }); }, 3000);
  });
  $("messages").addEventListener("scroll", () => { if ($("messages").scrollTop <= 8) loadOlder(); });
  $("join").disabled = true;
  if (token && tokenName()) $("user").placeholder = tokenName();
  connect();
})();
</script>
</body>
</html>
"""#
}
