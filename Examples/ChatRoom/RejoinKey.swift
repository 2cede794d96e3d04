import Foundation
import Switchboard

/// The secret of one user's presence in one room, sent in the `presence` answering its `join`
/// and required to take the name over from a connection the server still holds (a re-join
/// with `since`): without it, a re-join gets `name_taken` like any join.
///
/// 128 bits from the system's secure generator, base64url without padding (22 characters):
/// too many to guess, short enough for a JSON field. Never logged and never sent to others.
enum RejoinKey {
    /// A new key.
    static func make() -> String {
        var random = SecureRandom()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        for _ in 0..<2 {
            let value = random.next()
            for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
        }
        return Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Whether `presented` is `stored`, compared in constant time (the time depends on the
    /// lengths only, so a client cannot find a key byte by byte); false without a key.
    static func matches(_ presented: String?, _ stored: String) -> Bool {
        guard let presented else { return false }
        return ConstantTime.equals(presented, stored)
    }
}
