/// Collects a request body of a known length (``HTTPBodyFraming/length(_:)``) from chunks as
/// they arrive, byte-exact and bounded.
///
/// Keeps at most `length` bytes, whatever it is fed: bytes beyond the body are not kept
/// (``append(_:)`` says how many it took; a server without keep-alive ignores the rest).
/// Storage grows with the bytes actually received, not with the announced length, so a client
/// that announces a large body and sends nothing costs nothing. Pure: no I/O.
public struct HTTPBodyReader: Sendable, Equatable {
    /// The announced length: the body is complete at this many bytes.
    public let length: Int
    /// The bytes received so far (all of the body once ``isComplete``).
    public private(set) var body: [UInt8] = []

    /// A reader for a body of `length` bytes (a negative length counts as 0).
    public init(length: Int) {
        self.length = max(0, length)
    }

    /// Whether all ``length`` bytes have arrived.
    public var isComplete: Bool { body.count >= length }

    /// How many bytes of the body are still missing.
    public var remaining: Int { length - body.count }

    /// Takes the bytes of `chunk` that belong to the body (up to ``remaining``) and returns how
    /// many it took; the rest of `chunk` is not the body's.
    @discardableResult
    public mutating func append(_ chunk: some Collection<UInt8>) -> Int {
        let taken = Swift.min(remaining, chunk.count)
        guard taken > 0 else { return 0 }
        body.append(contentsOf: chunk.prefix(taken))
        return taken
    }
}
