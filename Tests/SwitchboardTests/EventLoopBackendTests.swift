import Foundation
import Testing
@testable import Switchboard

/// The event-loop backend choice (``EventLoopBackend``) and the io_uring backend end to end:
/// a server and a client on io_uring loops exchange lines, large messages and a close.
@Suite("Event-loop backends")
struct EventLoopBackendTests {
    @Test func automaticReadsTheEnvironmentAndExplicitChoicesIgnoreIt() throws {
        #expect(try EventLoopBackend.automatic.resolved(environment: nil) == .epoll)
        #expect(try EventLoopBackend.automatic.resolved(environment: "") == .epoll)
        #expect(try EventLoopBackend.automatic.resolved(environment: "EPOLL") == .epoll)
        #expect(try EventLoopBackend.epoll.resolved(environment: "io_uring") == .epoll)
        #expect(throws: SocketError.self) { try EventLoopBackend.automatic.resolved(environment: "kqueue") }
        if EventLoopBackend.isIOUringAvailable {
            #expect(try EventLoopBackend.automatic.resolved(environment: "io_uring") == .ioUring)
            #expect(try EventLoopBackend.ioUring.resolved(environment: "epoll") == .ioUring)
        } else {
            #expect(throws: SocketError.self) { try EventLoopBackend.ioUring.resolved(environment: nil) }
        }
    }

    @Test func aGroupReportsTheBackendItRuns() throws {
        let group = try EventLoopGroup(loopCount: 1, name: "backend-epoll", backend: .epoll)
        defer { group.shutdown() }
        #expect(group.backend == .epoll)
        #expect(group.loops.allSatisfy { $0.backend == .epoll })
    }

    @Test(.enabled(if: EventLoopBackend.isIOUringAvailable, "io_uring unavailable here"))
    func serverAndClientOnIOUringExchangeLinesLargeMessagesAndAClose() async throws {
        let group = try EventLoopGroup(loopCount: 2, name: "backend-uring", backend: .ioUring)
        defer { group.shutdown() }
        #expect(group.loops.allSatisfy { $0.backend == .ioUring })
        var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.shutdownTimeout = .seconds(30)
        let server = WebSocketServer(configuration: configuration, group: group)
        server.route("/echo") { connection in
            for await message in connection.messages() { try await connection.send(message) }
        }
        let port = try await server.start()
        let client = SocketAdapter(group: group)
        let lines = try await client.connect(to: WebSocketURLEndpoint(url: "ws://127.0.0.1:\(port)/echo"))
        var iterator = lines.makeAsyncIterator()
        // Small lines, then lines larger than one provided buffer (16 KiB), then a burst of
        // lines (6 × 900 KB in flight, more than the loop's whole buffer ring, 1 or 4 MiB):
        // each arrives whole and in order.
        func line(_ i: Int, _ size: Int) -> String {
            String(repeating: Character(UnicodeScalar(UInt8(97 + i % 26))), count: size)
        }
        for (i, size) in [1, 100, 16 * 1024 + 3, 300_000, 7].enumerated() {
            try await client.send(text: line(i, size) + "\n")
            #expect(await iterator.next() == Data(line(i, size).utf8))
        }
        for i in 0..<6 { try await client.send(text: line(i, 900_000) + "\n") }
        for i in 0..<6 {
            let echoed = await iterator.next()
            #expect(echoed?.count == 900_000)
            #expect(echoed == Data(line(i, 900_000).utf8))
        }
        await server.shutdown()
        while await iterator.next() != nil {}
        #expect(server.statistics.openConnections == 0)
    }

    #if os(Linux)
    /// Takes what an io_uring receive brings, and its end.
    final class CollectingReceiver: EventLoopReceiver, @unchecked Sendable {
        private let state = Locked<(bytes: [UInt8], ended: Bool)>(([], false))
        private let endedSignal: AsyncStream<Void>.Continuation
        let ended: AsyncStream<Void>

        init() {
            (ended, endedSignal) = AsyncStream<Void>.makeStream()
        }

        var bytes: [UInt8] { state.withLock { $0.bytes } }
        var hasEnded: Bool { state.withLock { $0.ended } }

        func handleIO(events: UInt32) {}
        func handleReceived(_ bytes: UnsafeRawBufferPointer) {
            state.withLock { $0.bytes.append(contentsOf: bytes) }
        }
        func handleReceiveEnded(errno: Int32) {
            state.withLock { $0.ended = true }
            endedSignal.yield()
            endedSignal.finish()
        }
    }

    /// An idle io_uring loop hands its receive buffers' pages back to the system (else every
    /// byte that ever flowed through, handshakes included, keeps the whole buffer area resident:
    /// 0.1 KiB per connection of 10,000 held idle), and no byte is lost when pages are handed
    /// back between receives: a trim runs whenever the loop has nothing to reap, here at every
    /// such moment during a 4 MiB transfer.
    @Test(.enabled(if: EventLoopBackend.isIOUringAvailable, "io_uring unavailable here"))
    func anIdleLoopHandsItsReceiveBuffersBackAndLosesNoByteAroundTrims() async throws {
        let group = try EventLoopGroup(loopCount: 1, name: "backend-uring-trim", backend: .ioUring)
        defer { group.shutdown() }
        let loop = group.next()
        func onLoop<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
            try await withCheckedThrowingContinuation { (done: CheckedContinuation<T, any Error>) in
                loop.execute { done.resume(with: Result { try body() }) }
            }
        }
        let pattern: @Sendable (Int) -> UInt8 = { UInt8(truncatingIfNeeded: $0 % 251) }
        /// Sends `count` pattern bytes through a new socket pair registered on the loop, closes
        /// the sending side, and returns what the loop received once the receive has ended.
        func transfer(_ count: Int) async throws -> [UInt8] {
            var pair: [Int32] = [0, 0]
            #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
            let (mine, peer) = (pair[0], pair[1])
            _ = fcntl(mine, F_SETFL, fcntl(mine, F_GETFL) | O_NONBLOCK)
            let receiver = CollectingReceiver()
            let events = SystemConstants.epollIn | SystemConstants.epollRdHup
            let slot = try await onLoop { try loop.register(fd: mine, events: events, handler: receiver, receiver: receiver) }
            let writer = Thread {
                var chunk = [UInt8](repeating: 0, count: 8 * 1024)
                var sent = 0
                while sent < count {
                    let n = min(chunk.count, count - sent)
                    for i in 0..<n { chunk[i] = pattern(sent + i) }
                    let written = chunk.withUnsafeBytes { write(peer, $0.baseAddress, n) }
                    if written <= 0 { break }
                    sent += written
                }
                close(peer)
            }
            writer.start()
            for await _ in receiver.ended { break }
            try await onLoop {
                loop.deregister(fd: mine, slot: slot)
                close(mine)
            }
            return receiver.bytes
        }

        // Never trimmed: what flowed through stays resident.
        try await onLoop { loop.ioUringTrimDelay = .max }
        let first = try await transfer(1 << 20)
        #expect(first.count == 1 << 20)
        #expect(first.indices.allSatisfy { first[$0] == pattern($0) })
        let before = try #require(try await onLoop { loop.ioUringBufferUse })
        guard before.canTrim else { return }  // a ring without deferred task running never trims
        #expect(before.trims == 0)
        #expect(before.residentBytes >= 64 * 1024)

        // Trimmed whenever nothing is left to reap, during the transfer too: every byte arrives.
        try await onLoop { loop.ioUringTrimDelay = 0 }
        let second = try await transfer(4 << 20)
        #expect(second.count == 4 << 20)
        #expect(second.indices.allSatisfy { second[$0] == pattern($0) })

        // And once idle, nothing stays resident (polled: the trim runs on the loop's next wait).
        let deadline = ContinuousClock.now + .seconds(120)
        var after = try #require(try await onLoop { loop.ioUringBufferUse })
        while after.residentBytes > 0 || after.trims == 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            after = try #require(try await onLoop { loop.ioUringBufferUse })
        }
        #expect(after.trims >= 1)
        #expect(after.residentBytes == 0)
    }

    /// A registration given up in the same loop iteration it was made in, whose descriptor
    /// number then names another socket (closed and reused by an accept, possibly on another
    /// loop's thread), must not receive that socket's bytes: the receive armed for the first
    /// registration was still unsubmitted, so it would have been submitted against the new
    /// socket and taken its first bytes (an HTTP request lost: the 408 seen in CI).
    @Test(.enabled(if: EventLoopBackend.isIOUringAvailable, "io_uring unavailable here"))
    func aDescriptorNumberReusedAfterDeregisteringDoesNotLoseTheNewSocketsBytes() async throws {
        let group = try EventLoopGroup(loopCount: 1, name: "backend-uring-reuse", backend: .ioUring)
        defer { group.shutdown() }
        let loop = group.next()
        var old: [Int32] = [0, 0], new: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &old) == 0)
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &new) == 0)
        let reused = old[0], oldPeer = old[1], newSide = new[0], newPeer = new[1]
        _ = fcntl(newSide, F_SETFL, fcntl(newSide, F_GETFL) | O_NONBLOCK)
        _ = fcntl(reused, F_SETFL, fcntl(reused, F_GETFL) | O_NONBLOCK)
        // The new socket's first bytes are there before anything is armed on it.
        #expect(write(newPeer, "first\n", 6) == 6)
        let first = CollectingReceiver(), second = CollectingReceiver()
        let events = SystemConstants.epollIn | SystemConstants.epollRdHup
        let registered = try await withCheckedThrowingContinuation { (done: CheckedContinuation<Int, any Error>) in
            loop.execute {
                do {
                    let slot = try loop.register(fd: reused, events: events, handler: first, receiver: first)
                    loop.deregister(fd: reused, slot: slot)
                    // The number now names the new socket (as an accept reusing it would).
                    _ = dup2(newSide, reused)
                    close(newSide)
                    done.resume(returning: try loop.register(fd: reused, events: events, handler: second, receiver: second))
                } catch {
                    done.resume(throwing: error)
                }
            }
        }
        #expect(write(newPeer, "second\n", 7) == 7)
        close(newPeer)
        for await _ in second.ended { break }
        #expect(String(decoding: second.bytes, as: UTF8.self) == "first\nsecond\n")
        #expect(first.bytes.isEmpty)
        #expect(!first.hasEnded)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                loop.deregister(fd: reused, slot: registered)
                close(reused)
                done.resume()
            }
        }
        close(oldPeer)
    }
    #endif

    /// Bytes received for a registration already given up (a receive that completed before the
    /// deregistration, reaped after it: the completion is dropped, its buffer handed back) were
    /// written into the buffer area like any other: the idle trim must hand those pages back
    /// too, else they stay resident for as long as the loop receives nothing more. Run on the
    /// driver directly, on this thread (the ring's only submitter), step by step.
    #if os(Linux)
    @Test(.enabled(if: EventLoopBackend.isIOUringAvailable, "io_uring unavailable here"))
    func bytesReceivedForAGivenUpRegistrationAreTrimmedToo() throws {
        var wakePipe: [Int32] = [0, 0]
        #expect(pipe(&wakePipe) == 0)  // the driver polls its wake-up descriptor; never written here
        defer { close(wakePipe[0]); close(wakePipe[1]) }
        let driver = try IOURingDriver(wakeFD: wakePipe[0])
        guard driver.canTrim else { return }  // a ring without deferred task running never trims
        var pair: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        let (mine, peer) = (pair[0], pair[1])
        defer { close(mine); close(peer) }
        _ = fcntl(mine, F_SETFL, fcntl(mine, F_GETFL) | O_NONBLOCK)
        driver.register(slot: 0, fd: mine, events: SystemConstants.epollIn | SystemConstants.epollRdHup, receives: true)
        driver.submitAndWait(timeoutNanoseconds: 0)
        let bytes = [UInt8](repeating: 7, count: 4096)
        #expect(bytes.withUnsafeBytes { write(peer, $0.baseAddress, $0.count) } == 4096)
        // The kernel writes into the buffers (and posts the completion) inside io_uring_enter.
        var waits = 0
        while driver.residentBufferBytes == 0 && waits < 600 {
            driver.submitAndWait(timeoutNanoseconds: 100_000_000)
            waits += 1
        }
        #expect(driver.residentBufferBytes > 0)
        driver.deregister(slot: 0)
        #expect(driver.processCompletions { (_: Int) -> EventLoopIOHandler? in nil } >= 1)
        #expect(driver.trimPending)
        driver.trimDelay = 0
        _ = driver.trimIfIdle(now: 1)
        #expect(driver.residentBufferBytes == 0)
        #expect(driver.trimCount == 1)
    }
    #endif
}
