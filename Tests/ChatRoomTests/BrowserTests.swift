import Foundation
import Testing

/// The page in a real browser: two headless Chromium windows via Selenium (Peers/browser_chat.py).
/// Fails (never skips) if Chromium, chromedriver or selenium is missing.
@Suite(.timeLimit(.minutes(5)))           // a hang guard only: two Chromiums start slowly on a loaded box
struct BrowserTests {
    @Test func twoBrowserWindowsChat() async throws {
        try await Python.require(module: "selenium", hint: "pip install selenium; apt-get install -y chromium chromium-driver")
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"))
        defer { server.child.signal(SIGKILL) }
        let screenshot = ChatPaths.packageRoot.appendingPathComponent(".build/artifacts/chat-browser.png")
        try? FileManager.default.removeItem(at: screenshot)
        let browser = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"),
                                       arguments: ["python3", "-u", ChatPaths.peers.appendingPathComponent("browser_chat.py").path,
                                                   server.httpURL, screenshot.path])
        defer { browser.signal(SIGKILL) }
        let status = await browser.waitForExit(timeout: .seconds(240))
        #expect(status == 0, """
            browser check failed (exit \(status); 2 = headless Chromium could not start):
            \(browser.stderrText.suffix(3000))
            stdout: \(browser.lines)
            """)
        #expect(FileManager.default.fileExists(atPath: screenshot.path), "no screenshot at \(screenshot.path)")
        #expect(await server.stop() == 0)
    }

    /// The page pages back (Peers/browser_history.py): a room of 120 messages, the page joins
    /// (the newest 50), and scrolled to the top again and again it asks for older pages until
    /// `next` is null: all 120 shown once, in order, each with its time, one request per page.
    @Test func pageLoadsOlderMessagesWhenScrolledToTheTop() async throws {
        try await Python.require(module: "selenium", hint: "pip install selenium; apt-get install -y chromium chromium-driver")
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: ChatHistoryTests.unthrottled)
        defer { server.child.signal(SIGKILL) }
        _ = try await ChatHistoryTests.post(120, into: "archive", url: server.wsURL, prefix: "h")
        let browser = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"),
                                       arguments: ["python3", "-u", ChatPaths.peers.appendingPathComponent("browser_history.py").path,
                                                   server.httpURL, "archive", "120", "h"])
        defer { browser.signal(SIGKILL) }
        let status = await browser.waitForExit(timeout: .seconds(240))
        #expect(status == 0, """
            browser check failed (exit \(status); 2 = headless Chromium could not start):
            \(browser.stderrText.suffix(3000))
            stdout: \(browser.lines)
            """)
        #expect(browser.lines.contains { $0.hasPrefix("ok: 120 messages in 2 pages") })
        #expect(await server.stop() == 0)
    }

    #if JWTSupport
    /// The page with `#token=…` against `--jwt-secret-file` (Peers/browser_token.py): the
    /// fragment leaves the address bar, the join takes the token's name, and one in-band refresh
    /// through `window.switchboardChat.getToken` keeps the page connected past the first `exp`.
    @Test func pageWithATokenInItsFragmentRefreshesThroughTheHook() async throws {
        try await Python.require(module: "selenium", hint: "pip install selenium; apt-get install -y chromium chromium-driver")
        let server = try await ChatServerProcess(db: try ChatPaths.tempDirectory().appendingPathComponent("chat.sqlite"),
                                                 extraArguments: try ChatTokenTests.arguments())
        defer { server.child.signal(SIGKILL) }
        let browser = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"),
                                       arguments: ["python3", "-u", ChatPaths.peers.appendingPathComponent("browser_token.py").path,
                                                   server.httpURL, ChatTokenTests.secret,
                                                   ChatTokenTests.isThreadSanitized ? "20" : "10"])
        defer { browser.signal(SIGKILL) }
        let status = await browser.waitForExit(timeout: .seconds(240))
        #expect(status == 0, """
            browser check failed (exit \(status); 2 = headless Chromium could not start):
            \(browser.stderrText.suffix(3000))
            stdout: \(browser.lines)
            """)
        #expect(await server.stop() == 0)
    }
    #endif
}
