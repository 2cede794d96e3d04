import Testing
@testable import Switchboard

/// `SwitchboardError` is what every typed-throwing call returns: its size is room reserved in
/// each caller's async frame, which a suspended task keeps for its whole life.
@Suite struct SwitchboardErrorTests {
    /// One reference wide. With its six fields stored inline (about 80 bytes) the 16-byte echo
    /// handler's frame was 256 bytes instead of 128, and a task route's suspended task needed a
    /// second allocator slab: 3.42 KiB per idle connection instead of 2.1 (docs/performance.md).
    @Test func isOneReferenceWide() {
        #expect(MemoryLayout<SwitchboardError>.size == MemoryLayout<AnyObject>.size)
    }

    @Test func keepsEveryField() {
        let e = SwitchboardError(kind: .handshakeRejected, message: "m", httpStatus: 403, httpBody: "no",
                                 closeCode: .policyViolation, errno: 13)
        #expect(e.kind == .handshakeRejected)
        #expect(e.message == "m")
        #expect(e.httpStatus == 403)
        #expect(e.httpBody == "no")
        #expect(e.closeCode == .policyViolation)
        #expect(e.errno == 13)
        #expect(e.description == "SwitchboardError.handshakeRejected: m — body: no")
    }

    /// Equality compares the fields, not the identity of their storage.
    @Test func equalWhenEveryFieldIs() {
        let a = SwitchboardError.closed(code: .normalClosure, reason: "bye")
        #expect(a == SwitchboardError.closed(code: .normalClosure, reason: "bye"))
        #expect(a != SwitchboardError.closed(code: .goingAway, reason: "bye"))
        #expect(a != SwitchboardError.closed(code: .normalClosure, reason: "later"))
        #expect(SwitchboardError.io(SocketError(errno: 5, operation: "read"))
                != SwitchboardError.io(SocketError(errno: 6, operation: "read")))
        #expect(SwitchboardError(kind: .proxy, message: "p", httpStatus: 502)
                != SwitchboardError(kind: .proxy, message: "p", httpStatus: 503))
        #expect(SwitchboardError(kind: .handshakeRejected, message: "m", httpBody: "a")
                != SwitchboardError(kind: .handshakeRejected, message: "m", httpBody: "b"))
    }

    /// `dump(error)`, a debugger's `po` and anything else that reflects shows the fields a user
    /// reads (the ones set), not the one-reference storage behind them.
    @Test func reflectsItsFieldsNotItsStorage() {
        let e = SwitchboardError(kind: .handshakeRejected, message: "m", httpStatus: 403, httpBody: "no")
        let children = Mirror(reflecting: e).children.map { ($0.label ?? "", String(describing: $0.value)) }
        #expect(children.map(\.0) == ["kind", "message", "httpStatus", "httpBody"])
        #expect(children.map(\.1) == ["handshakeRejected", "m", "403", "no"])
        let io = Mirror(reflecting: SwitchboardError.io(SocketError(errno: 5, operation: "read"))).children
        #expect(io.map { $0.label ?? "" } == ["kind", "message", "errno"])
        var dumped = ""
        dump(SwitchboardError.closed(code: .normalClosure, reason: "bye"), to: &dumped)
        #expect(!dumped.contains("storage"))
        #expect(dumped.contains("closeCode"))
    }
}
