import Foundation
import Logging
import Testing
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

/// Every component logs through the logger it was given, with the connection id in metadata,
/// and secrets (query tokens, bearer headers) never reach a log line.
@Suite struct ComponentLoggingTests {
    /// Keeps every record, rendered as one line with its metadata.
    struct CapturingLogHandler: LogHandler {
        let records: TestLock<[String]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { _, new in new }
            let rendered = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            records.withLock { $0.append("\(event.level) \(event.message) \(rendered)") }
        }
    }

    private func logger(_ label: String, into records: TestLock<[String]>) -> Logger {
        Logger(label: label) { _ in CapturingLogHandler(records: records) }
    }

    @Test func clientAndServerLogWithConnectionIdsAndWithoutSecrets() async throws {
        let serverLog = TestLock<[String]>([])
        let clientLog = TestLock<[String]>([])
        let secret = "s3cr3t-\(UUID().uuidString)"
        let server = WebSocketServer(configuration: .init(host: "127.0.0.1", port: 0),
                                     logger: logger("test.server", into: serverLog))
        server.route("/echo") { connection in
            for await message in connection.messages() { try await connection.send(message) }
        }
        let port = try await server.start()
        let client = SocketAdapter(logger: logger("test.client", into: clientLog))
        let endpoint = try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/echo?token=\(secret)&room=a",
                                                headers: [("Authorization", "Bearer \(secret)")])
        let lines = try await client.connect(to: endpoint)
        try await client.send(text: "hi\n")
        for await _ in lines { break }
        await client.close()
        await server.shutdown()

        let clientLines = clientLog.withLock { $0 }
        let serverLines = serverLog.withLock { $0 }
        // The connector and the connection log through the adapter's logger, with the id.
        #expect(clientLines.contains { $0.contains("connected") && $0.contains("connection=") })
        #expect(clientLines.contains { $0.contains("connection closed") && $0.contains("connection=") })
        #expect(clientLines.contains { $0.contains("token=<redacted>") })
        // The server and its connections log through the server's logger.
        #expect(serverLines.contains { $0.contains("connection open") && $0.contains("connection=") })
        #expect(serverLines.contains { $0.contains("connection closed") && $0.contains("code=1000") })
        for line in clientLines + serverLines {
            #expect(!line.contains(secret), "secret in a log line: \(line)")
        }
    }
}
