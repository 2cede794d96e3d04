/// The system CSPRNG (`getrandom`), for masking keys, handshake keys and backoff jitter.
///
/// A wrapper rather than `SystemRandomNumberGenerator` itself: that type has no stored
/// properties, and passing a zero-sized value `inout` crashes ThreadSanitizer's access
/// instrumentation on Swift 6.3.1 (an inout access to an empty struct has no real address).
public struct SecureRandom: RandomNumberGenerator, Sendable {
    private var calls: UInt8 = 0

    public init() {}

    public mutating func next() -> UInt64 {
        calls &+= 1
        var system = SystemRandomNumberGenerator()
        return system.next()
    }
}
