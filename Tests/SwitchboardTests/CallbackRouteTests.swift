import Foundation
import Synchronization
import Testing
@testable import Switchboard
import SwitchboardCore

/// Callback routes (`WebSocketCallbacks`): no task per connection, messages handled on the loop.
extension ServerInterop {
@Suite struct CallbackRouteTests {
    /// Counts callbacks; written on the loop, read by the test after the fact.
    final class Calls: Sendable {
        let opened = Atomic<Int>(0)
        let messages = Atomic<Int>(0)
        let closed = Atomic<Int>(0)
        let closeCode = Atomic<Int>(0)
    }

    static func echoCallbacks(_ calls: Calls) -> WebSocketCallbacks {
        WebSocketCallbacks(
            onOpen: { _ in calls.opened.add(1, ordering: .relaxed) },
            onMessage: { connection, message in
                calls.messages.add(1, ordering: .relaxed)
                _ = try? connection.sendNow(message)
            },
            onClose: { connection in
                calls.closeCode.store(Int(connection.closeStatus?.code.rawValue ?? 0), ordering: .relaxed)
                calls.closed.add(1, ordering: .relaxed)
            })
    }

    /// A peer nobody here wrote (Python websockets) gets its text and binary echoed, and each
    /// callback runs the expected number of times.
    @Test func pythonClientIsEchoedThroughCallbacks() async throws {
        let calls = Calls()
        try await withTestServer(setup: { $0.route("/echo", callbacks: Self.echoCallbacks(calls)) }) { server, port in
            let r = try await ServerPeer.run("echo", port: port, ["/echo"])
            #expect(r.exitCode == 0, "\(r.transcript)")
            let text = try #require(r.first("text"), "\(r.transcript)")
            #expect(text["received"] as? String == "héllo ✓ switchboard")
            let binary = try #require(r.first("binary"), "\(r.transcript)")
            #expect(binary["received"] as? String == binary["sent"] as? String)
            #expect(r.first("closed")?["code"] as? Int == 1000, "\(r.transcript)")
            // The close callback runs once the server side has closed too, and the open count
            // drops just after it (on the loop thread): wait for both.
            #expect(await serverEventually {
                calls.closed.load(ordering: .relaxed) >= 1 && server.statistics.openConnections == 0
            })
            #expect(calls.opened.load(ordering: .relaxed) == 1)
            #expect(calls.messages.load(ordering: .relaxed) >= 2)
            #expect(calls.closed.load(ordering: .relaxed) == 1)
            #expect(calls.closeCode.load(ordering: .relaxed) == 1000)
            #expect(server.statistics.openConnections == 0)
        }
    }

    /// With a 4 KiB outbound high-water mark, a client that sends 20,000 × 1 KiB before reading
    /// anything makes the server stop reading once the kernel buffers and the client's inbound
    /// queue (a few MiB) are full, instead of queueing megabytes itself; once the client
    /// reads, every message comes back, in order, byte-exact.
    @Test func outboundBackpressurePausesReadingAndLosesNothing() async throws {
        let calls = Calls()
        try await withTestServer({
            $0.connection.outboundHighWaterMark = 4 << 10
            $0.connection.outboundLowWaterMark = 1 << 10
        }, setup: { $0.route("/echo", callbacks: Self.echoCallbacks(calls)) }) { _, port in
            let adapter = SocketAdapter()
            let messages = try await adapter.connectMessages(to: try WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/echo"))
            let count = 20_000
            let sender = Task {
                for i in 0..<count {
                    var payload = [UInt8](repeating: UInt8(i % 251), count: 1024)
                    payload[0] = UInt8(i & 0xff)
                    payload[1] = UInt8(i >> 8)
                    try await adapter.send(binary: Data(payload))
                }
            }
            // Nobody reads meanwhile. (The wait only gives a server that wrongly keeps reading the
            // time to read everything; one that stops is stopped however long this takes.)
            try await Task.sleep(for: .milliseconds(300))
            // The server has stopped reading: far fewer than all messages were handled.
            let handledWhileStalled = calls.messages.load(ordering: .relaxed)
            #expect(handledWhileStalled < count, "server read everything although nothing was read back")
            var received = 0
            for await message in messages {
                guard case .binary(let bytes) = message else { Issue.record("not binary"); break }
                #expect(bytes.count == 1024)
                #expect(Int(bytes[0]) | Int(bytes[1]) << 8 == received, "out of order at \(received)")
                #expect(bytes[2] == UInt8(received % 251))
                received += 1
                if received == count { break }
            }
            try await sender.value
            #expect(received == count)
            await adapter.close()
        }
    }
}
}
