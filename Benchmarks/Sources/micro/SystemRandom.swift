/// The same generator the connection uses for client masking keys (`SecureRandom` in the
/// Switchboard module, which the core does not see): one `getrandom` per key.
struct SystemRandom: RandomNumberGenerator {
    private var calls: UInt8 = 0

    mutating func next() -> UInt64 {
        calls &+= 1
        var system = SystemRandomNumberGenerator()
        return system.next()
    }
}

/// A fast deterministic generator for building inputs (SplitMix64).
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z &>> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z &>> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z &>> 31)
    }
}
