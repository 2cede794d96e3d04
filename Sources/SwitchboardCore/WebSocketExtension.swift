/// One element of a `Sec-WebSocket-Extensions` header (RFC 6455 §9.1): an extension name and
/// its parameters, in order.
///
/// Parameter values given as quoted strings are unquoted; RFC 6455 §9.1 requires the unquoted
/// value to be a token, and ``parse(_:)`` enforces it.
public struct WebSocketExtension: Sendable, Equatable {
    /// The extension token, e.g. `permessage-deflate` (compared case-insensitively by callers).
    public var name: String
    /// The parameters in order; `value` is nil for a parameter written without `=`.
    public var parameters: [Parameter]

    /// One `name[=value]` parameter.
    public struct Parameter: Sendable, Equatable {
        /// The parameter token.
        public var name: String
        /// The value (unquoted), or nil when the parameter has none.
        public var value: String?

        /// A parameter.
        public init(name: String, value: String? = nil) {
            self.name = name
            self.value = value
        }
    }

    /// An extension element.
    public init(name: String, parameters: [Parameter] = []) {
        self.name = name
        self.parameters = parameters
    }

    /// The header text of this element: `name; p1; p2=v`.
    public var headerValue: String {
        var text = name
        for p in parameters {
            text += "; " + p.name
            if let v = p.value { text += "=" + v }
        }
        return text
    }

    /// Parses every element of one or more `Sec-WebSocket-Extensions` field values (fields are
    /// concatenated in order, RFC 9110 §5.3).
    ///
    /// - Returns: the elements in order, or nil when any value breaks the grammar (an empty
    ///   name, a name or parameter that is not a token, an unterminated quoted string, a quoted
    ///   value that is not a token once unquoted). Empty list elements (`a, , b`) are skipped.
    public static func parse(_ fieldValues: [String]) -> [WebSocketExtension]? {
        var result: [WebSocketExtension] = []
        for value in fieldValues {
            guard let elements = splitOutsideQuotes(Array(value.utf8), on: UInt8(ascii: ",")) else { return nil }
            for element in elements {
                guard let parts = splitOutsideQuotes(element, on: UInt8(ascii: ";")) else { return nil }
                let name = trimmed(parts[0])
                if name.isEmpty && parts.count == 1 { continue }  // empty list element
                guard isToken(name) else { return nil }
                var parameters: [Parameter] = []
                for raw in parts.dropFirst() {
                    let bytes = trimmed(raw)
                    if let eq = bytes.firstIndex(of: UInt8(ascii: "=")) {
                        let pname = trimmed(Array(bytes[..<eq]))
                        var pvalue = trimmed(Array(bytes[(eq + 1)...]))
                        guard isToken(pname) else { return nil }
                        if pvalue.first == UInt8(ascii: "\"") {
                            guard let unquoted = unquote(pvalue) else { return nil }
                            pvalue = unquoted
                        }
                        guard isToken(pvalue) else { return nil }
                        parameters.append(Parameter(name: String(decoding: pname, as: UTF8.self),
                                                    value: String(decoding: pvalue, as: UTF8.self)))
                    } else {
                        guard isToken(bytes) else { return nil }
                        parameters.append(Parameter(name: String(decoding: bytes, as: UTF8.self)))
                    }
                }
                result.append(WebSocketExtension(name: String(decoding: name, as: UTF8.self), parameters: parameters))
            }
        }
        return result
    }

    /// Splits on `separator` outside double-quoted strings; nil on an unterminated quote.
    private static func splitOutsideQuotes(_ bytes: [UInt8], on separator: UInt8) -> [[UInt8]]? {
        var parts: [[UInt8]] = []
        var current: [UInt8] = []
        var inQuotes = false
        var escaped = false
        for b in bytes {
            if inQuotes {
                current.append(b)
                if escaped {
                    escaped = false
                } else if b == UInt8(ascii: "\\") {
                    escaped = true
                } else if b == UInt8(ascii: "\"") {
                    inQuotes = false
                }
            } else if b == separator {
                parts.append(current)
                current = []
            } else {
                if b == UInt8(ascii: "\"") { inQuotes = true }
                current.append(b)
            }
        }
        guard !inQuotes else { return nil }
        parts.append(current)
        return parts
    }

    /// The content of a quoted string (`"…"`, backslash escapes resolved); nil if malformed.
    private static func unquote(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count >= 2, bytes.first == UInt8(ascii: "\""), bytes.last == UInt8(ascii: "\"") else { return nil }
        var out: [UInt8] = []
        var escaped = false
        for b in bytes[1..<(bytes.count - 1)] {
            if escaped {
                out.append(b)
                escaped = false
            } else if b == UInt8(ascii: "\\") {
                escaped = true
            } else if b == UInt8(ascii: "\"") {
                return nil
            } else {
                out.append(b)
            }
        }
        return escaped ? nil : out
    }

    private static func trimmed(_ bytes: [UInt8]) -> [UInt8] {
        var start = 0
        var end = bytes.count
        while start < end && (bytes[start] == 0x20 || bytes[start] == 0x09) { start += 1 }
        while end > start && (bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09) { end -= 1 }
        return Array(bytes[start..<end])
    }

    private static func isToken(_ bytes: [UInt8]) -> Bool {
        !bytes.isEmpty && bytes.allSatisfy(HTTPSyntax.isTokenByte)
    }
}
