import Foundation

/// The rooms a token allows: its `rooms` claim, names with `*` wildcards (`*` matches any run
/// of characters, the empty one included; everything else matches itself, case-sensitively, as
/// room names are). A pure value, shared with the test target.
///
/// The claim reaches the server as the verifier's text: a JSON array of strings
/// (`["lobby","team-*"]`), or one string (one pattern). Anything else (a number, an object, an
/// array holding something other than strings) allows no room: a claim the server cannot read
/// must not widen what the token grants. No claim at all allows every room.
package struct RoomPatterns: Equatable, Sendable {
    /// nil: every room (no `rooms` claim).
    package let patterns: [String]?

    /// Every room.
    package static let any = RoomPatterns(patterns: nil)

    package init(patterns: [String]?) { self.patterns = patterns }

    /// From the `rooms` claim's text as the verifier passes it (nil: no claim).
    package init(claim: String?) {
        guard let claim else { self.init(patterns: nil); return }
        let trimmed = claim.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("[") {
            let parsed = (try? JSONDecoder().decode([String].self, from: Data(trimmed.utf8))) ?? []
            self.init(patterns: parsed)
        } else if trimmed.hasPrefix("{") || trimmed.hasPrefix("\"") || Double(trimmed) != nil
                    || ["true", "false", "null"].contains(trimmed) {
            // JSON text of another kind: allows nothing.
            self.init(patterns: [])
        } else {
            self.init(patterns: [claim])
        }
    }

    /// Whether `room` matches one of the patterns.
    package func allows(_ room: String) -> Bool {
        guard let patterns else { return true }
        return patterns.contains { Self.matches(room, pattern: $0) }
    }

    /// Glob match with `*` only, by unicode scalars; linear backtracking to the last `*`
    /// (at most length × length steps, and names are at most 64 characters).
    package static func matches(_ name: String, pattern: String) -> Bool {
        let s = Array(name.unicodeScalars), p = Array(pattern.unicodeScalars)
        var i = 0, j = 0
        var star: Int? = nil, resume = 0
        while i < s.count {
            if j < p.count, p[j] != "*", p[j] == s[i] {
                i += 1; j += 1
            } else if j < p.count, p[j] == "*" {
                star = j; resume = i; j += 1
            } else if let star {
                j = star + 1; resume += 1; i = resume
            } else {
                return false
            }
        }
        while j < p.count, p[j] == "*" { j += 1 }
        return j == p.count
    }
}
