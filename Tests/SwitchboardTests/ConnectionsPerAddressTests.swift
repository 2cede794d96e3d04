import Foundation
#if MetricsSupport
import MetricsTestKit
#endif
import Testing
import SwitchboardCore
@testable import Switchboard

/// `maxConnectionsPerAddress`: one peer address cannot take every place, while other addresses
/// still get in. The second address is 127.0.0.2 (the whole of 127.0.0.0/8 is loopback on Linux).
@Suite("Server: connections per address")
struct ConnectionsPerAddressTests {
    static func server(_ configure: (inout WebSocketServerConfiguration) -> Void,
                       make: (WebSocketServerConfiguration) -> WebSocketServer = { WebSocketServer(configuration: $0) })
        -> WebSocketServer {
        var config = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        config.loopCount = 1
        // Stalled sockets keep their places for the whole test, however slow the build.
        config.connection.handshakeTimeout = .seconds(3600)
        configure(&config)
        let server = make(config)
        server.route("/") { c in for await _ in c.messages() {} }
        return server
    }

    /// Sends an upgrade request from `source` and returns the server's answer.
    static func upgrade(port: Int, from source: String) async throws -> ServerRawSocket.HTTPReply {
        try await onServerTestThread {
            let s = try ServerRawSocket(port: port, from: source)
            defer { s.close() }
            try s.send(ServerRawSocket.upgradeRequest())
            return try s.readHTTPResponse()
        }
    }

    static func sockets(_ server: WebSocketServer) -> Int { server.counters.sockets.load(ordering: .relaxed) }

    @Test func oneAddressCannotExceedItsCapWhileAnotherGetsIn() async throws {
        let server = Self.server { $0.maxConnectionsPerAddress = 2 }
        let port = try await server.start()
        // 127.0.0.1's two places: one socket still in its handshake, one upgraded connection.
        let stalled = try ServerRawSocket(port: port, from: "127.0.0.1")
        let upgraded = try await onServerTestThread { () -> UncheckedBox<ServerRawSocket> in
            let s = try ServerRawSocket(port: port, from: "127.0.0.1")
            try s.handshake()
            return UncheckedBox(s)
        }
        #expect(await serverEventually { Self.sockets(server) == 2 })

        let refused = try await Self.upgrade(port: port, from: "127.0.0.1")
        #expect(refused.status == 429)
        let body = try JSONSerialization.jsonObject(with: Data(refused.body)) as? [String: [String: Any]]
        #expect(body?["error"]?["code"] as? String == "too_many_connections", "\(refused.bodyText)")
        #expect(body?["error"]?["type"] as? String == "rate_limit_error", "\(refused.bodyText)")
        #expect(server.statistics.rejectedConnections == 1)

        // Another address is not affected.
        #expect(try await Self.upgrade(port: port, from: "127.0.0.2").status == 101)
        #expect(server.statistics.rejectedConnections == 1)

        // A place of 127.0.0.1 frees up, from the handshake and from the upgraded connection.
        stalled.close()
        #expect(await serverEventually { Self.sockets(server) == 1 })
        #expect(try await Self.upgrade(port: port, from: "127.0.0.1").status == 101)
        upgraded.value.close()
        #expect(await serverEventually { Self.sockets(server) == 0 })
        let both = try [ServerRawSocket(port: port, from: "127.0.0.1"), ServerRawSocket(port: port, from: "127.0.0.1")]
        #expect(await serverEventually { Self.sockets(server) == 2 })
        #expect(try await Self.upgrade(port: port, from: "127.0.0.1").status == 429)
        #expect(server.statistics.rejectedConnections == 2)
        #expect(server.addressesWithConnections == 1)
        for s in both { s.close() }
        // Every place is free again, and the table forgets the addresses: no entry stays at 0.
        #expect(await serverEventually { Self.sockets(server) == 0 })
        #expect(server.addressesWithConnections == 0)
        await server.shutdown()
    }

    @Test func tlsSocketsOverTheCapOfTheirAddressAreClosedAtOnce() async throws {
        let pki = try TestPKI.get()
        let server = Self.server {
            $0.maxConnectionsPerAddress = 1
            $0.tls = TLSServerConfiguration(certificateChainFile: pki.serverCertificate, privateKeyFile: pki.serverKey)
        }
        let port = try await server.start()
        let holder = try ServerRawSocket(port: port, from: "127.0.0.1")
        #expect(await serverEventually { Self.sockets(server) == 1 })
        // The second socket from 127.0.0.1 is closed before any TLS handshake (the read timeout
        // is a failure guard only: the server would otherwise wait for the handshake for an hour).
        let closed = try await onServerTestThread { () -> Bool in
            let s = try ServerRawSocket(port: port, timeout: 60, from: "127.0.0.1")
            defer { s.close() }
            return s.readsEOF()
        }
        #expect(closed)
        #expect(server.statistics.rejectedConnections == 1)
        // 127.0.0.2 still gets a place (its socket waits for its TLS handshake).
        let other = try ServerRawSocket(port: port, from: "127.0.0.2")
        #expect(await serverEventually { Self.sockets(server) == 2 })
        #expect(server.statistics.rejectedConnections == 1)
        #expect(server.addressesWithConnections == 2)
        holder.close()
        other.close()
        #expect(await serverEventually { Self.sockets(server) == 0 })
        #expect(server.addressesWithConnections == 0)
        await server.shutdown()
    }

    #if MetricsSupport
    @Test func refusalsOverTheCapOfAnAddressAreCountedWithTheirReason() async throws {
        let metrics = TestMetrics()
        let server = Self.server({ $0.maxConnectionsPerAddress = 1 }) { WebSocketServer(configuration: $0, metricsFactory: metrics) }
        let port = try await server.start()
        let holder = try ServerRawSocket(port: port, from: "127.0.0.1")
        #expect(await serverEventually { Self.sockets(server) == 1 })
        #expect(try await Self.upgrade(port: port, from: "127.0.0.1").status == 429)
        #expect(try metrics.expectCounter("switchboard_connections_rejected_total",
                                          [("reason", "address_capacity")]).totalValue == 1)
        #expect(try metrics.expectCounter("switchboard_handshake_failures_total", [("status", "429")]).totalValue == 1)
        holder.close()
        await server.shutdown()
    }
    #endif
}
