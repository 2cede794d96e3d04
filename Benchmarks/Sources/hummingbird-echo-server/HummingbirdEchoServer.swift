// Comparison peer: a Hummingbird 2 WebSocket echo server, using the idiomatic async API
// (`Application` + `.http1WebSocketUpgrade(webSocketRouter:)` + `router.ws`, and the handler's
// `inbound.messages(maxSize:)` loop).
//
// Settings changed from Hummingbird's defaults, and why:
// - `maxFrameSize` 16 MiB (default 16 KiB): 1 MiB echo messages are benchmarked and must arrive
//   and be sent back as single frames, as with the other servers.
// - `autoPing` disabled (default: a ping every 30 s): the other servers send no pings of their own.
// - log level `.warning`, so logging is not measured.
// - listen backlog 4096 (default 256), the same as Switchboard's default and the NIO peer.
// Everything else (UTF-8 validation off, close timeout, HTTP/1 pipeline) is Hummingbird's default.
// Text messages arrive as `String` and are written back as `.text(String)`: that decode and
// re-encode is what Hummingbird's message API does, so it is part of what is measured.
import ArgumentParser
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOPosix

import Foundation

/// Largest message (and frame) accepted: 16 MiB, well above the 1 MiB echo messages benchmarked.
let maxMessageSize = 16 << 20

@main
struct HummingbirdEchoServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hummingbird-echo-server",
        abstract: "A Hummingbird 2 WebSocket echo server (benchmark comparison peer)."
    )

    @Option(help: "Address to bind.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to bind (0 = ephemeral).")
    var port: Int = 9001

    @Option(help: "Number of event loops (threads).")
    var loops: Int = System.coreCount

    func validate() throws {
        guard self.loops >= 1 else { throw ValidationError("--loops must be at least 1") }
        guard (0...65535).contains(self.port) else { throw ValidationError("--port must be 0...65535") }
    }

    func run() async throws {
        var logger = Logger(label: "hummingbird-echo-server")
        logger.logLevel = .warning

        let eventLoopGroup = MultiThreadedEventLoopGroup(numberOfThreads: self.loops)

        // Any path is accepted: "/" is the root node of the router's trie, "**" matches
        // every other path.
        let wsRouter = Router(context: BasicWebSocketRequestContext.self)
        for path: RouterPath in ["/", "**"] {
            wsRouter.ws(path) { inbound, outbound, _ in
                for try await message in inbound.messages(maxSize: maxMessageSize) {
                    switch message {
                    case .text(let text):
                        try await outbound.write(.text(text))
                    case .binary(let buffer):
                        try await outbound.write(.binary(buffer))
                    }
                }
            }
        }

        // Plain HTTP requests (no upgrade) get Hummingbird's default 404.
        let router = Router()

        let host = self.host
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(
                webSocketRouter: wsRouter,
                configuration: .init(
                    ws: .init(maxFrameSize: maxMessageSize, autoPing: .disabled)
                )
            ),
            configuration: .init(
                address: .hostname(host, port: self.port),
                serverName: nil,
                backlog: 4096
            ),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? -1
                FileHandle.standardOutput.write(
                    Data("hummingbird-echo-server listening on ws://\(host):\(port)\n".utf8)
                )
            },
            eventLoopGroupProvider: .shared(eventLoopGroup),
            logger: logger
        )

        // runService shuts down gracefully on SIGTERM and SIGINT.
        try await app.runService()
        try await eventLoopGroup.shutdownGracefully()
    }
}
