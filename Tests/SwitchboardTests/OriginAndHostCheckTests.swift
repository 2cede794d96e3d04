import Foundation
import Testing
@testable import Switchboard
import SwitchboardCore
import SwitchboardTestSupport

extension ServerInterop {
/// Cross-site WebSocket hijacking and DNS rebinding, against a real server: the origin policy
/// and the loopback `Host` check, for upgrades and plain HTTP.
@Suite struct OriginAndHostCheckTests {
    typealias Body = ServerRejectionBodyTests

    private static func upgrade(host: String = "127.0.0.1", origin: String?) -> String {
        var request = ServerRawSocket.upgradeRequest(path: "/echo", extraHeaders: origin.map { ["Origin: \($0)"] } ?? [])
        request = request.replacingOccurrences(of: "Host: 127.0.0.1\r\n", with: "Host: \(host)\r\n")
        return request
    }

    @Test func sameOriginPolicyRefusesOtherSitesAndAllowsItsOwnPagesAndPrograms() async throws {
        try await withTestServer({ $0.originPolicy = .sameOrigin }, setup: { $0.route("/echo", handler: echoHandler) }) {
            server, port in
            let host = "127.0.0.1:\(port)"
            let foreign = try await Body.reply(port: port, Self.upgrade(host: host, origin: "https://evil.example"))
            try Body.checkBody(foreign, status: 403, "foreign origin")
            #expect(foreign.bodyText.contains("origin_not_allowed"))
            let otherPort = try await Body.reply(port: port, Self.upgrade(host: host, origin: "http://127.0.0.1:1"))
            try Body.checkBody(otherPort, status: 403, "same host, another port")
            let own = try await Body.reply(port: port, Self.upgrade(host: host, origin: "http://127.0.0.1:\(port)"))
            #expect(own.status == 101, "\(own.bodyText)")
            let program = try await Body.reply(port: port, Self.upgrade(host: host, origin: nil))
            #expect(program.status == 101, "\(program.bodyText)")
            #expect(server.statistics.rejectedConnections >= 2)
        }
    }

    @Test func sameOriginAlsoAcceptsListedOrigins() async throws {
        try await withTestServer({ $0.originPolicy = .sameOrigin(also: ["https://app.example"]) },
                                 setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let listed = try await Body.reply(port: port, Self.upgrade(host: "127.0.0.1:\(port)", origin: "https://app.example"))
            #expect(listed.status == 101, "\(listed.bodyText)")
            let other = try await Body.reply(port: port, Self.upgrade(host: "127.0.0.1:\(port)", origin: "https://evil.example"))
            try Body.checkBody(other, status: 403, "unlisted origin")
        }
    }

    @Test func defaultPolicyLeavesOriginsToTheApplication() async throws {
        try await withTestServer(setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let foreign = try await Body.reply(port: port, Self.upgrade(host: "127.0.0.1:\(port)", origin: "https://evil.example"))
            #expect(foreign.status == 101, "\(foreign.bodyText)")
        }
    }

    /// DNS rebinding: a page on evil.example re-points its name at 127.0.0.1; its requests carry
    /// `Host: evil.example` and an `Origin` that matches it.
    @Test func loopbackServerRefusesForeignHostNames() async throws {
        try await withTestServer({ $0.originPolicy = .sameOrigin }, setup: { server in
            server.route("/echo", handler: echoHandler)
            server.onHTTPRequest { _ in HTTPResponse(status: 200, body: Array("page".utf8)) }
        }) { _, port in
            let rebound = try await Body.reply(port: port, Self.upgrade(host: "evil.example:\(port)",
                                                                        origin: "http://evil.example:\(port)"))
            try Body.checkBody(rebound, status: 403, "rebound upgrade")
            #expect(rebound.bodyText.contains("host_not_allowed"))
            let page = try await Body.reply(port: port, "GET / HTTP/1.1\r\nHost: evil.example:\(port)\r\n\r\n")
            try Body.checkBody(page, status: 403, "rebound page")
            let noHost = try await Body.reply(port: port, "GET / HTTP/1.1\r\n\r\n")
            #expect(noHost.status == 403 || noHost.status == 400, "\(noHost.status)")
            for host in ["localhost:\(port)", "127.0.0.1:\(port)", "127.0.0.1"] {
                let ok = try await Body.reply(port: port, "GET / HTTP/1.1\r\nHost: \(host)\r\n\r\n")
                #expect(ok.status == 200, "\(host): \(ok.status) \(ok.bodyText)")
            }
        }
    }

    @Test func hostCheckCanBeTurnedOffBehindAReverseProxy() async throws {
        try await withTestServer({ $0.refusesNonLoopbackHosts = false },
                                 setup: { $0.route("/echo", handler: echoHandler) }) { _, port in
            let proxied = try await Body.reply(port: port, Self.upgrade(host: "chat.example", origin: nil))
            #expect(proxied.status == 101, "\(proxied.bodyText)")
        }
    }

    @Test func authenticateSeesThePeersAddress() async throws {
        let seen = Locked<[String?]>([])
        try await withTestServer(setup: { server in
            server.route("/echo", authenticate: { request in
                seen.withLock { $0.append(request.remoteAddress) }
                return .accept()
            }, handler: echoHandler)
        }) { _, port in
            let request = Self.upgrade(host: "127.0.0.1:\(port)", origin: nil)
            let first = try await Body.reply(port: port, request)
            #expect(first.status == 101)
            let second = try await RawHTTP.exchange(port: port, request, from: "127.0.0.2")
            #expect(second.status == 101)
        }
        #expect(seen.withLock { $0 } == ["127.0.0.1", "127.0.0.2"])
    }
}
}
