import ArgumentParser
import ExampleSupport
import Foundation
import Switchboard
import SwitchboardCore

/// The Autobahn|Testsuite client testee: reads the case count, echoes every message of every
/// case, then asks the fuzzing server to write its reports.
@main
struct EchoClient: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "echo-client", abstract: "Autobahn|Testsuite client testee built on Switchboard's client.")

    @Option(help: "Fuzzing server URL, e.g. ws://127.0.0.1:9001") var url: String
    @Option(help: "Agent name in the reports.") var agent = "Switchboard"
    @Option(help: "Run only this case number.") var onlyCase: Int?
    @Flag(help: "Do not offer permessage-deflate (offered by default, with context takeover).") var noDeflate = false
    @OptionGroup var network: ClientNetworkOptions

    func run() async throws {
        let count = try await caseCount()
        print("running \(count) cases as \(agent)")
        let cases = onlyCase.map { [$0] } ?? Array(1...max(count, 1))
        for n in cases where n <= count {
            try await runCase(n)
        }
        let reports = try endpoint("/updateReports?agent=\(PercentEncoding.encode(agent))")
        let adapter = SocketAdapter()
        let stream = try await adapter.connectMessages(to: reports)
        for await _ in stream {}
        print("reports updated")
    }

    private func endpoint(_ target: String) throws -> WebSocketURLEndpoint {
        var configuration = WebSocketConfiguration()
        configuration.protocolLimits = WebSocketProtocolLimits(maxFrameSize: 64 << 20, maxMessageSize: 64 << 20)
        configuration.closeTimeout = .seconds(2)
        if !noDeflate { configuration.compression = .contextTakeover }
        return try WebSocketURLEndpoint(url: url + target, tls: try network.tlsConfiguration(),
                                        configuration: configuration, proxy: try network.proxyConfiguration())
    }

    private func caseCount() async throws -> Int {
        let adapter = SocketAdapter()
        let stream = try await adapter.connectMessages(to: try endpoint("/getCaseCount"))
        var count = 0
        for await message in stream {
            count = Int(message.text ?? "") ?? 0
        }
        return count
    }

    private func runCase(_ n: Int) async throws {
        let adapter = SocketAdapter()
        let target = "/runCase?case=\(n)&agent=\(PercentEncoding.encode(agent))"
        let stream: AsyncStream<WebSocketMessage>
        do {
            stream = try await adapter.connectMessages(to: try endpoint(target))
        } catch {
            print("case \(n): connect failed: \(error)")
            return
        }
        guard let connection = await adapter.currentConnection else { return }
        for await message in stream {
            do { try await connection.send(message) } catch { break }
        }
    }
}
