/// A synchronous entry from a connection's event-loop thread into the connection's isolation,
/// for the socket channel's delegate calls that come on every read.
///
/// The loop is the connection actor's executor, so its thread already runs isolated to the
/// actor; `assumeIsolated` states that and checks it, but passes its closure through
/// `withoutActuallyEscaping`, which moves the closure's context to the heap for its escape
/// check: one or two allocations on every read (a malloc probe under connection churn counted
/// ~4 of a connection's ~25). An entry is a closure without captures, made once, cast the way
/// `assumeIsolated` casts it (an `isolated` parameter is an ordinary one in the calling
/// convention), and called with its argument: no allocation. Debug builds check the thread.
struct ConnectionLoopEntry<Argument>: @unchecked Sendable {
    // Safety: the closure captures nothing and is immutable.
    private let body: (WebSocketConnection, Argument) -> Void

    init(_ isolated: @escaping (isolated WebSocketConnection, Argument) -> Void) {
        body = unsafeBitCast(isolated, to: ((WebSocketConnection, Argument) -> Void).self)
    }

    /// Runs the entry for `connection`; only on the connection's loop thread.
    @inline(__always)
    func callAsFunction(_ connection: WebSocketConnection, _ argument: Argument) {
        connection.loop.assertInEventLoop()
        body(connection, argument)
    }
}

/// A synchronous, throwing call into a connection's isolation from code that is already
/// isolated to it but cannot say so statically (a `nonisolated(nonsending)` method whose caller
/// turned out to be the connection itself): no executor switch, no allocation. Made once, cast
/// as ``ConnectionLoopEntry`` casts. Debug builds check the thread.
struct ConnectionLoopCall<Argument, Result, Failure: Error>: @unchecked Sendable {
    // Safety: the closure captures nothing and is immutable.
    private let body: (WebSocketConnection, Argument) throws(Failure) -> Result

    init(_ isolated: @escaping (isolated WebSocketConnection, Argument) throws(Failure) -> Result) {
        body = unsafeBitCast(isolated, to: ((WebSocketConnection, Argument) throws(Failure) -> Result).self)
    }

    /// Runs the call for `connection`; only from code isolated to it (its loop thread).
    @inline(__always)
    func callAsFunction(_ connection: WebSocketConnection, _ argument: Argument) throws(Failure) -> Result {
        connection.loop.assertInEventLoop()
        return try body(connection, argument)
    }
}
