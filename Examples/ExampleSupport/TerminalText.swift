/// Text from the network made safe for a terminal or a log line.
///
/// A peer's text printed raw can drive the terminal: `ESC [` sequences recolour, move the
/// cursor, retitle the window or clear the screen, a carriage return overwrites the line with a
/// fake one, and Unicode bidirectional overrides reorder what is shown. Both functions replace
/// such characters with a visible escape, so what is printed is what was sent:
///
/// - C0 and C1 control characters and DEL (U+0000–U+001F, U+007F–U+009F) become `\xHH`
///   (`ESC` → `\x1b`, `CR` → `\x0d`);
/// - line and paragraph separators (U+2028, U+2029) and the bidirectional controls (U+061C,
///   U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) become `\u{HHHH}`.
///
/// Everything else, other scripts and emoji included, is kept as is.
package enum TerminalText {
    /// `text` for a terminal: tab and newline are kept (a message may have several lines),
    /// every other character listed above is escaped. A backslash is kept, so an escape cannot
    /// be told from the same characters typed by the peer: this is for reading, not parsing.
    package static func escaped(_ text: String) -> String {
        escape(text, keepingTabAndNewline: true)
    }

    /// `text` as one short line for a log (an identifier such as a session id): tab and newline
    /// are escaped too, as are a backslash (`\\`) and every format character (`\u{HHHH}`), so
    /// the value is unambiguous; beyond `maxLength` characters it is cut and ends with `…`.
    /// 64 characters show a UUID (36) whole and keep a hostile value from filling the log.
    package static func inline(_ text: String, maxLength: Int = 64) -> String {
        var out = ""
        var count = 0
        for character in text {
            if count == max(0, maxLength) { return out + "…" }
            out += escape(String(character), keepingTabAndNewline: false, strict: true)
            count += 1
        }
        return out
    }

    private static func escape(_ text: String, keepingTabAndNewline: Bool, strict: Bool = false) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            let v = scalar.value
            if keepingTabAndNewline, v == 0x09 || v == 0x0A {
                out.unicodeScalars.append(scalar)
            } else if v < 0x20 || (0x7F...0x9F).contains(v) {
                out += "\\x" + hex(v, width: 2)
            } else if strict, v == 0x5C {
                out += "\\\\"
            } else if isInvisibleControl(scalar, strict: strict) {
                out += "\\u{" + hex(v, width: 4) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    private static func isInvisibleControl(_ scalar: Unicode.Scalar, strict: Bool) -> Bool {
        switch scalar.value {
        case 0x2028, 0x2029, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return strict && scalar.properties.generalCategory == .format
        }
    }

    private static func hex(_ value: UInt32, width: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
