import CSwitchboardShims

/// The system CSPRNG, for masking keys, handshake keys and backoff jitter.
///
/// Values come from a per-thread pool refilled with one `getrandom` call per 256 bytes, so a
/// client's masking key costs a load, not a system call; each value is handed out once.
/// Should the system generator ever fail, it falls back to `SystemRandomNumberGenerator`
/// (which traps rather than return weak randomness).
///
/// Not `SystemRandomNumberGenerator` itself: that type has no stored properties, and passing a
/// zero-sized value `inout` crashes ThreadSanitizer's access instrumentation on Swift 6.3.1.
package struct SecureRandom: RandomNumberGenerator, Sendable {
    private var calls: UInt8 = 0

    package init() {}

    package mutating func next() -> UInt64 {
        calls &+= 1
        var ok: Int32 = 0
        let value = switchboard_secure_random_u64(&ok)
        if ok != 0 { return value }
        var system = SystemRandomNumberGenerator()
        return system.next()
    }
}
