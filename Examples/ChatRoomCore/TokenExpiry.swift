import Foundation

/// Reads the `exp` claim of a JWT without verifying it: what a client needs to know when to ask
/// for a new token (the server verifies). Pure; shared with the test target.
package enum TokenExpiry {
    /// The token's `exp` (seconds since 1970), or nil when the token is not three base64url
    /// parts, its payload is not a JSON object, or `exp` is absent or not a finite number in
    /// range (never traps on what it reads).
    package static func of(_ token: String) -> Date? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = base64URLDecoded(parts[1]),
              let object = try? JSONSerialization.jsonObject(with: payload) as? [String: Any],
              let number = object["exp"] as? NSNumber else { return nil }
        let seconds = number.doubleValue
        guard seconds.isFinite, seconds >= 0, seconds < 1e11 else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    /// Unix seconds of `date`, rounded down (the form of `exp` and of the `refreshed` answer);
    /// nil outside 0…10^11 (never traps).
    package static func unixSeconds(_ date: Date) -> Int64? {
        let t = date.timeIntervalSince1970.rounded(.down)
        guard t.isFinite, t >= 0, t < 1e11 else { return nil }
        return Int64(exactly: t)
    }

    private static func base64URLDecoded(_ text: Substring) -> Data? {
        guard text.utf8.count <= 16_384 else { return nil }
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.utf8.count % 4 != 0 { s.append("=") }
        return Data(base64Encoded: s)
    }
}
