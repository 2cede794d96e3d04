#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Testing
@testable import Switchboard

/// Out of descriptors (`EMFILE`), the listener pauses instead of spinning on its level-triggered
/// readiness, and accepts again once descriptors are free. Run against `echo-server` in a child
/// process with a small `RLIMIT_NOFILE`: the limit is process-wide, so lowering it here would
/// break every suite running beside this one.
@Suite("Listener: out of descriptors")
struct ListenerDescriptorExhaustionTests {
    /// The descriptor limit of the child: room for a few dozen connections.
    static let descriptorLimit = 64
    /// Connections beyond the ones the child has room for; they wait in the listen backlog.
    static let extraConnections = 8

    /// Upgrade requests sent on many raw sockets, and which of them were answered.
    final class Upgrades {
        let sockets: [ServerRawSocket]
        private(set) var statuses: [Int?]

        init(port: Int, count: Int) throws {
            var sockets: [ServerRawSocket] = []
            for _ in 0..<count {
                let socket = try ServerRawSocket(port: port)
                try socket.send(ServerRawSocket.upgradeRequest())
                sockets.append(socket)
            }
            self.sockets = sockets
            statuses = Array(repeating: nil, count: count)
        }

        /// Reads what has arrived, without waiting; returns how many sockets got their answer.
        func answered() throws -> Int {
            for (i, socket) in sockets.enumerated() where statuses[i] == nil {
                _ = try socket.fillAvailable()
                if let reply = try socket.bufferedHTTPResponse() { statuses[i] = reply.status }
            }
            return statuses.count { $0 != nil }
        }
    }

    /// The child's descriptors: how many of the numbers below its limit are taken (it has run
    /// out when all are), and how many are sockets. Not the plain count of open descriptors: the
    /// child may have inherited some above its limit from this process, where other suites open
    /// descriptors at the same time.
    struct Descriptors: Equatable {
        var belowLimit: Int
        var sockets: Int

        init?(pid: Int32) {
            guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return nil }
            belowLimit = entries.count { (Int($0) ?? Int.max) < ListenerDescriptorExhaustionTests.descriptorLimit }
            sockets = entries.count {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)"))?.hasPrefix("socket:[") == true
            }
        }
    }

    /// What the wait for the limit observes: the child's descriptors and the answers so far.
    struct AtLimit: Equatable {
        var descriptors: Descriptors?
        var answered: Int
    }

    static func pauseWarnings(_ log: String) -> Int {
        log.split(separator: "\n").count { $0.contains("pausing accepts") }
    }

    @Test func listenerPausesWhileOutOfDescriptorsAndAcceptsAgainWhenSomeAreFree() async throws {
        let server = try await ChildServer.start("echo-server", ["--port", "0", "--loops", "1", "--ping-interval", "0"],
                                                 descriptorLimit: Self.descriptorLimit)
        defer { server.stop() }
        let idle = try #require(Descriptors(pid: server.pid))
        let room = Self.descriptorLimit - idle.belowLimit
        try #require(room > 4, "echo-server holds \(idle.belowLimit) descriptors when idle: no room under \(Self.descriptorLimit)")

        // More connections than the child has descriptors for: it accepts and upgrades `room`
        // of them, then runs out (EMFILE) with the rest pending in its listen backlog.
        let upgrades = try Upgrades(port: server.port, count: room + Self.extraConnections)
        var last = AtLimit(descriptors: nil, answered: 0)
        let atLimit = await waitWhileProgressing({ () -> AtLimit in
            last = AtLimit(descriptors: Descriptors(pid: server.pid), answered: (try? upgrades.answered()) ?? -1)
            return last
        }, until: { observed in
            // Every descriptor taken, and every accepted socket (the sockets beyond the idle
            // ones) answered: nothing is left to do but wait for a descriptor.
            guard let d = observed.descriptors else { return false }
            return d.belowLimit == Self.descriptorLimit && observed.answered == d.sockets - idle.sockets
        })
        try #require(atLimit, "the child never reached its descriptor limit with every accepted socket answered: \(last)")
        #expect(upgrades.statuses.allSatisfy { $0 == nil || $0 == 101 }, "\(upgrades.statuses)")

        // (a) Held at the limit, the child stays (nearly) idle: a listener that retries on every
        // readiness event spins a whole core here.
        let cpuBefore = try #require(server.cpuTime())
        let start = ContinuousClock.now
        try await Task.sleep(for: .seconds(2))
        let cpu = try #require(server.cpuTime()) - cpuBefore
        let wall = ContinuousClock.now - start
        #expect(cpu < wall * 0.3, "echo-server used \(cpu) of CPU in \(wall) at its descriptor limit")
        #expect(Descriptors(pid: server.pid)?.belowLimit == Self.descriptorLimit)

        // (c) The pause is reported.
        #expect(await waitWhileProgressing({ Self.pauseWarnings(server.standardError) }, until: { $0 >= 1 }),
                "no warning about the pause in the child's log: \(server.standardError)")

        // (b) Descriptors free up: the pending connections are accepted and upgraded, and a new
        // one is served.
        let answeredAtLimit = try upgrades.answered()
        for (i, socket) in upgrades.sockets.enumerated() where upgrades.statuses[i] != nil { socket.close() }
        let everyoneAnswered = await waitWhileProgressing({ (try? upgrades.answered()) ?? -1 },
                                                          until: { $0 == upgrades.sockets.count })
        #expect(everyoneAnswered, "\(upgrades.statuses.count { $0 != nil }) of \(upgrades.sockets.count) answered")
        #expect(upgrades.statuses.allSatisfy { $0 == 101 }, "\(upgrades.statuses)")
        #expect(answeredAtLimit < upgrades.sockets.count)                 // some were accepted only now
        let port = server.port
        let echo = try await onServerTestThread { () -> [UInt8] in
            let socket = try ServerRawSocket(port: port)
            defer { socket.close() }
            try socket.handshake()
            try socket.send(ServerRawSocket.frame(opcode: 0x1, payload: Array("still serving".utf8)))
            return try socket.readFrame().payload
        }
        #expect(echo == Array("still serving".utf8))

        // One warning for the whole episode, not one per failed accept.
        #expect(Self.pauseWarnings(server.standardError) == 1, "\(server.standardError)")
        for socket in upgrades.sockets { socket.close() }
    }
}
