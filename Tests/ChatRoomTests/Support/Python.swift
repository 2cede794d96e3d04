import Foundation

enum Python {
    /// Fails (never skips) when python3 or a module is missing.
    static func require(module: String, hint: String) async throws {
        let p = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"), arguments: ["python3", "-c", "import \(module)"])
        let status = await p.waitForExit(timeout: .seconds(60))
        guard status == 0 else {
            throw TestFailure("python3 module '\(module)' is required for this test but cannot be imported (\(hint)): \(p.stderrText)")
        }
    }

    /// Starts the stdin/stdout chat peer (Peers/chat_client.py).
    static func chatPeer(url: String) async throws -> ChildProcess {
        try await require(module: "websockets", hint: "pip install websockets")
        let p = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"),
                                 arguments: ["python3", "-u", ChatPaths.peers.appendingPathComponent("chat_client.py").path, url])
        try await p.waitForLine(timeout: .seconds(60), "python peer to connect") { $0 == "OPEN" }
        return p
    }
}
