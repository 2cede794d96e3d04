// Comparison peer: a raw SwiftNIO WebSocket echo server.
//
// Written the way SwiftNIO's classic `NIOWebSocketServer` example does it: a `ServerBootstrap`
// whose child channels get `configureHTTPServerPipeline(withServerUpgrade:)` with a
// `NIOWebSocketServerUpgrader`, and after the upgrade a plain `ChannelInboundHandler` of
// `WebSocketFrame`s. No async bridging (`NIOAsyncChannel`) is used: this is the fastest way NIO
// offers to write a WebSocket server, so it is the "raw NIO" reference point.
//
// Fairness choices, so the comparison with a message-oriented library is like for like:
// - Fragmented messages are reassembled by NIO's own `NIOWebSocketFrameAggregator` (limit 16 MiB)
//   and the whole message is echoed as one frame. Its fast path passes an unfragmented frame
//   straight through (no copy, no check), so for the usual single-frame messages it costs one
//   extra handler hop and nothing else.
// - The only per-message work is what any WebSocket server must do: unmask the payload (one copy,
//   `WebSocketFrame.unmaskedData`, as in NIO's example) and write it back unmasked with the same
//   opcode. Writes are flushed once per read batch (`channelReadComplete`), as NIO recommends.
// - Text frames are not checked for valid UTF-8: NIOWebSocket does not do that, and neither does
//   this server (Hummingbird's default `validateUTF8: false` does not either).
// - Back-pressure: reading stops while the channel is not writable (autoRead off) and resumes
//   when it is writable again, so a fast sender cannot make the server buffer without bound.
// - Listen backlog 4096, the same as Switchboard's default, so connect bursts are not refused.
// - Pings are answered with pongs; a close frame is answered with a close frame carrying the same
//   status code, after which the connection is closed.
import ArgumentParser
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Largest message (and frame) accepted: 16 MiB, well above the 1 MiB echo messages benchmarked.
let maxMessageSize = 16 << 20

/// Echoes every text and binary message back, answers pings and closes.
final class WebSocketEchoHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var awaitingClose = false
    private var needsFlush = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            // The aggregator hands us whole messages (fin set); echo with the same opcode, unmasked.
            let reply = WebSocketFrame(fin: true, opcode: frame.opcode, data: frame.unmaskedData)
            context.write(Self.wrapOutboundOut(reply), promise: nil)
            self.needsFlush = true
        case .ping:
            let reply = WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)
            context.write(Self.wrapOutboundOut(reply), promise: nil)
            self.needsFlush = true
        case .pong:
            break
        case .connectionClose:
            self.receivedClose(context: context, frame: frame)
        default:
            // Reserved opcodes (continuation frames never get here: the aggregator consumes them).
            self.closeOnError(context: context, code: .protocolError)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if self.needsFlush {
            self.needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        // Simple back-pressure: stop reading while the outbound buffer is over its high-water mark.
        let writable = context.channel.isWritable
        // Re-enabling autoRead triggers a read by itself.
        try? context.channel.syncOptions?.setOption(.autoRead, value: writable)
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // Protocol errors from the decoder are answered by NIO's WebSocketProtocolErrorHandler
        // (automatic error handling is on); errors from the aggregator (message too big, bad
        // fragmentation) end up here.
        if let aggregatorError = error as? NIOWebSocketFrameAggregator.Error {
            switch aggregatorError {
            case .accumulatedFrameSizeIsTooLarge, .tooManyFragments:
                self.closeOnError(context: context, code: .messageTooLarge)
            default:
                self.closeOnError(context: context, code: .protocolError)
            }
        } else {
            context.close(promise: nil)
        }
    }

    private func receivedClose(context: ChannelHandlerContext, frame: WebSocketFrame) {
        if self.awaitingClose {
            // We sent a close already and this is the peer's answer.
            context.close(promise: nil)
            return
        }
        // Unsolicited close: answer it with the peer's status code (if it sent one), then close.
        var data = frame.unmaskedData
        let code = data.readSlice(length: 2) ?? ByteBuffer()
        let reply = WebSocketFrame(fin: true, opcode: .connectionClose, data: code)
        self.awaitingClose = true
        self.needsFlush = false
        let channel = context.channel
        context.writeAndFlush(Self.wrapOutboundOut(reply)).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    private func closeOnError(context: ChannelHandlerContext, code: WebSocketErrorCode) {
        guard !self.awaitingClose else {
            context.close(promise: nil)
            return
        }
        self.awaitingClose = true
        var data = context.channel.allocator.buffer(capacity: 2)
        data.write(webSocketErrorCode: code)
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
        let channel = context.channel
        context.writeAndFlush(Self.wrapOutboundOut(frame)).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

/// Answers plain HTTP requests (no upgrade) with 426 Upgrade Required and closes.
/// Removed from the pipeline when a WebSocket upgrade succeeds.
final class UpgradeRequiredHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = Self.unwrapInboundIn(data) else { return }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: "0")
        headers.add(name: "Connection", value: "close")
        let head = HTTPResponseHead(version: .http1_1, status: .upgradeRequired, headers: headers)
        context.write(Self.wrapOutboundOut(.head(head)), promise: nil)
        let channel = context.channel
        context.writeAndFlush(Self.wrapOutboundOut(.end(nil))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

@main
struct NIOEchoServer: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nio-echo-server",
        abstract: "A raw SwiftNIO WebSocket echo server (benchmark comparison peer)."
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

    func run() throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: self.loops)

        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 4096)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: maxMessageSize,
                        automaticErrorHandling: true,
                        shouldUpgrade: { channel, _ in
                            // Any path is accepted.
                            channel.eventLoop.makeSucceededFuture(HTTPHeaders())
                        },
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                let sync = channel.pipeline.syncOperations
                                try sync.addHandler(
                                    NIOWebSocketFrameAggregator(
                                        minNonFinalFragmentSize: 0,
                                        maxAccumulatedFrameCount: 1 << 16,
                                        maxAccumulatedFrameSize: maxMessageSize
                                    )
                                )
                                try sync.addHandler(WebSocketEchoHandler())
                            }
                        }
                    )
                    let sync = channel.pipeline.syncOperations
                    try sync.configureHTTPServerPipeline(
                        withServerUpgrade: (
                            upgraders: [upgrader],
                            completionHandler: { context in
                                context.pipeline.removeHandler(name: "upgrade-required", promise: nil)
                            }
                        )
                    )
                    try sync.addHandler(UpgradeRequiredHandler(), name: "upgrade-required")
                }
            }

        let serverChannel = try bootstrap.bind(host: self.host, port: self.port).wait()
        guard let boundPort = serverChannel.localAddress?.port else {
            throw ValidationError("could not determine the bound port")
        }
        FileHandle.standardOutput.write(
            Data("nio-echo-server listening on ws://\(self.host):\(boundPort)\n".utf8)
        )

        // Exit cleanly on SIGINT or SIGTERM: close the listener, which ends the wait below.
        let signalQueue = DispatchQueue(label: "nio-echo-server.signals")
        var signalSources: [DispatchSourceSignal] = []
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: signalQueue)
            source.setEventHandler {
                serverChannel.close(promise: nil)
            }
            source.resume()
            signalSources.append(source)
        }

        try serverChannel.closeFuture.wait()
        for source in signalSources { source.cancel() }
        try group.syncShutdownGracefully()
    }
}
