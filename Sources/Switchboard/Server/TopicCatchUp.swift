import SwitchboardCore

/// A subscription whose live publications are held while the application sends what the
/// subscriber missed from its own store (a chat room's history after the last message id the
/// client saw), so that the two join with no gap, no duplicate and no reordering.
///
/// ```swift
/// let catchUp = await server.subscribeCatchingUp(connection, to: "room:general")
/// let missed = try await store.messages(after: lastSeenID)          // read after subscribing
/// try await catchUp.finish(sending: .text(historyLine(missed))) { payload in
///     // live publications the history already holds are skipped
///     messageID(in: payload).map { $0 <= newestSent ? .skip : .deliverAndStopFiltering } ?? .deliver
/// }
/// ```
///
/// Order of events: ``WebSocketServer/subscribeCatchingUp(_:to:)`` subscribes at once and holds
/// every publication of the topic that reaches the connection; the application reads its store
/// (everything published before the subscription is there, provided it stores before it
/// publishes); ``finish(sending:filter:)`` queues `first`, then the held publications that
/// `filter` lets through, in order, then lets live publications flow, still passing them
/// through `filter` until it answers ``TopicCatchUpDecision/deliverAndStopFiltering``.
///
/// A new catch-up of the same topic on the same connection, begun while an earlier one's
/// filter is still waiting for a publication to skip (a late one), keeps that filter: each
/// publication then goes through every filter still active, oldest first, and is sent only if
/// none skips it; each filter leaves when it says stop (at most 16 are kept per topic, the
/// oldest dropped beyond that). Begun while an earlier one still holds, it takes over what that
/// one held: nothing is dropped. The later one's finish (or cancel) sends them with its own;
/// the earlier one's finish then sends its `first` only, and its filter joins the chain.
///
/// Bounded: the held publications count against the connection's
/// ``WebSocketConfiguration/outboundLimit``; above it the connection is closed with 1013 like
/// any slow consumer. A catch-up never finished keeps holding (until that limit): always call
/// ``finish(sending:filter:)`` or ``cancel()``.
public struct TopicCatchUp: Sendable {
    /// The topic being caught up.
    public let topic: String
    /// The subscriber.
    public let connection: WebSocketConnection
    let generation: UInt64

    /// Queues `first` (if any; waiting for room in the outbound queue like
    /// ``WebSocketConnection/send(_:compress:)``), then the held publications `filter` lets
    /// through, then resumes live delivery (filtered until `filter` says stop). Throws when the
    /// connection closed meanwhile (the held publications are dropped with it).
    public func finish(sending first: WebSocketMessage?,
                       filter: (@Sendable (_ payload: [UInt8]) -> TopicCatchUpDecision)? = nil) async throws(SwitchboardError) {
        try await connection.finishCatchUp(topic: topic, generation: generation, first: first, filter: filter)
    }

    /// Stops holding: the held publications are delivered as they are (through the filters of
    /// earlier catch-ups still active, if any), and live ones flow again.
    public func cancel() async {
        try? await connection.finishCatchUp(topic: topic, generation: generation, first: nil, filter: nil)
    }
}

/// What happens to one publication of a topic in catch-up (see ``TopicCatchUp``).
public enum TopicCatchUpDecision: Sendable, Equatable {
    /// Not sent to this subscriber (the application already sent it).
    case skip
    /// Sent; later publications are still filtered.
    case deliver
    /// Sent, and the filter is dropped: every later publication is sent as usual (unless the
    /// filter of another catch-up of the topic, still active, skips it).
    case deliverAndStopFiltering
}
