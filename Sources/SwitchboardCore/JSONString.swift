/// JSON string literals (RFC 8259 §7), for the few places that write JSON by hand (error
/// bodies, event lines) without a JSON encoder.
package enum JSONString {
    /// `string` quoted and escaped: `"`, `\`, control characters, and U+2028/U+2029 (so the
    /// text is also safe inside JavaScript).
    package static func quoted(_ string: String) -> String {
        var output = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case "\u{08}": output += "\\b"
            case "\u{0C}": output += "\\f"
            case "\u{00}"..."\u{1F}", "\u{2028}", "\u{2029}":
                let hex = String(scalar.value, radix: 16, uppercase: false)
                output += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            default: output.unicodeScalars.append(scalar)
            }
        }
        return output + "\""
    }
}
