/// A 32-bit masking key (RFC 6455 §5.3).
///
/// Every frame a client sends carries a fresh key chosen by a strong source of entropy; the
/// payload byte at index `i` is XORed with key byte `i % 4`. Servers never mask (§5.1).
/// The core has no randomness of its own: callers pass the generator (a CSPRNG such as
/// `SystemRandomNumberGenerator` in production, a fixed sequence in tests).
public struct WebSocketMaskingKey: Hashable, Sendable, CustomStringConvertible {
    /// The first key byte on the wire, applied to payload bytes 0, 4, 8, …
    public var b0: UInt8
    /// The second key byte on the wire, applied to payload bytes 1, 5, 9, …
    public var b1: UInt8
    /// The third key byte on the wire, applied to payload bytes 2, 6, 10, …
    public var b2: UInt8
    /// The fourth key byte on the wire, applied to payload bytes 3, 7, 11, …
    public var b3: UInt8

    /// Creates a key from its four bytes in wire order.
    @inlinable
    public init(_ b0: UInt8, _ b1: UInt8, _ b2: UInt8, _ b3: UInt8) {
        self.b0 = b0
        self.b1 = b1
        self.b2 = b2
        self.b3 = b3
    }

    /// Draws a random key: the low 32 bits of one `UInt64` from `rng`, least significant byte
    /// first (so a generator returning `0x3d21fa37` yields the key `37 fa 21 3d`).
    ///
    /// RFC 6455 §10.3 requires the key to be unpredictable; that is the generator's job.
    @inlinable
    public init<G: RandomNumberGenerator>(using rng: inout G) {
        let value: UInt64 = rng.next()
        self.init(
            UInt8(truncatingIfNeeded: value),
            UInt8(truncatingIfNeeded: value &>> 8),
            UInt8(truncatingIfNeeded: value &>> 16),
            UInt8(truncatingIfNeeded: value &>> 24)
        )
    }

    /// The key bytes in wire order.
    @inlinable
    public var bytes: (UInt8, UInt8, UInt8, UInt8) {
        get { (b0, b1, b2, b3) }
        set { (b0, b1, b2, b3) = newValue }
    }

    /// The key byte applied to payload index `index` (any integer; only `index mod 4` matters).
    @inlinable
    public func byte(at index: Int) -> UInt8 {
        switch index & 3 {
        case 0: return b0
        case 1: return b1
        case 2: return b2
        default: return b3
        }
    }

    /// The four key bytes in hex, e.g. `WebSocketMaskingKey(37 fa 21 3d)`.
    public var description: String {
        let hex = [b0, b1, b2, b3].map { byte in
            let digits = String(byte, radix: 16)
            return byte < 0x10 ? "0" + digits : digits
        }
        return "WebSocketMaskingKey(\(hex.joined(separator: " ")))"
    }
}
