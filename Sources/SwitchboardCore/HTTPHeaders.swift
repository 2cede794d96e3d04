/// Ordered HTTP header fields with ASCII case-insensitive lookup (RFC 9110 §5).
///
/// Field order and duplicates are preserved exactly as received or added. Names are compared
/// case-insensitively; values are stored as given. The container itself does not validate:
/// parsers only produce valid fields, and serializers validate or sanitize what they write.
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    /// One field as a `(name, value)` pair.
    public typealias Element = (name: String, value: String)

    private var fields: [Element]

    /// Creates headers from `(name, value)` pairs, in order.
    public init(_ fields: [(String, String)] = []) {
        self.fields = fields.map { (name: $0.0, value: $0.1) }
    }

    /// Creates headers from a literal; order is the literal's order and duplicates are kept.
    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// Makes room for `count` fields, so that as many `add`s allocate nothing more.
    package mutating func reserveCapacity(_ count: Int) {
        fields.reserveCapacity(count)
    }

    /// Appends a field (does not replace existing fields with the same name).
    public mutating func add(name: String, value: String) {
        fields.append((name: name, value: value))
    }

    /// Removes every field named `name` (case-insensitive).
    public mutating func remove(name: String) {
        fields.removeAll { HTTPSyntax.equalsIgnoringASCIICase($0.name, name) }
    }

    /// These headers without the fields named any of `names` (case-insensitive), in storage
    /// of exactly the size needed (for headers kept for a connection's lifetime).
    package func removingFields(named names: [String]) -> HTTPHeaders {
        // The names' lengths as bits: a field whose name has none of them is kept without a
        // comparison (most are; lengths of 64 and more are always compared).
        // A constant: the nested function captures it by value (a captured `var` is a box,
        // checked for exclusive access on every read).
        let lengths = names.reduce(UInt64(0)) { bits, name in
            name.utf8.count < 64 ? bits | 1 << UInt64(name.utf8.count) : bits
        }
        func dropped(_ field: Element) -> Bool {
            let count = field.name.utf8.count
            if count < 64, lengths & (1 << UInt64(count)) == 0 { return false }
            return names.contains { HTTPSyntax.equalsIgnoringASCIICase(field.name, $0) }
        }
        return fields.withUnsafeBufferPointer { all in
            var keptCount = 0
            for index in all.indices where !dropped(all[index]) { keptCount += 1 }
            var result = HTTPHeaders()
            result.fields.reserveCapacity(keptCount)
            for index in all.indices where !dropped(all[index]) { result.fields.append(all[index]) }
            return result
        }
    }

    /// Replaces every field named `name` with a single field holding `value`.
    public mutating func replaceOrAdd(name: String, value: String) {
        remove(name: name)
        add(name: name, value: value)
    }

    /// The first value of the field named `name` (case-insensitive), or `nil`.
    public subscript(name: String) -> String? {
        fields.first { HTTPSyntax.equalsIgnoringASCIICase($0.name, name) }?.value
    }

    /// Whether at least one field is named `name` (case-insensitive).
    public func contains(name: String) -> Bool { self[name] != nil }

    /// All values of the fields named `name` (case-insensitive), in order.
    public func values(for name: String) -> [String] {
        fields.lazy.filter { HTTPSyntax.equalsIgnoringASCIICase($0.name, name) }.map(\.value)
    }

    /// The comma-separated list elements (RFC 9110 §5.6.1) across all fields named `name`,
    /// trimmed, empty elements dropped, case preserved. Use this for case-sensitive lists such
    /// as `Sec-WebSocket-Protocol` (RFC 6455 §4.1).
    public func listElements(for name: String) -> [String] {
        values(for: name).flatMap(HTTPSyntax.listElements)
    }

    /// Like ``listElements(for:)`` but ASCII-lowercased, for case-insensitive token lists such
    /// as `Connection: keep-alive, Upgrade` → `["keep-alive", "upgrade"]`.
    public func tokens(for name: String) -> [String] {
        listElements(for: name).map(HTTPSyntax.asciiLowercased)
    }

    /// Whether the comma-separated lists (RFC 9110 §5.6.1) of the fields named `name` hold
    /// `token`, compared ASCII case-insensitively: `tokens(for: name).contains(token)` with
    /// `token` lowercase, without building the lists (it runs on every handshake).
    public func containsListToken(_ token: String, in name: String) -> Bool {
        HTTPSyntax.withUTF8Bytes(token) { wanted in
            for field in fields where HTTPSyntax.equalsIgnoringASCIICase(field.name, name) {
                let found = HTTPSyntax.withUTF8Bytes(field.value) { value in
                    var start = 0
                    while start <= value.count {
                        var end = start
                        while end < value.count, value[end] != UInt8(ascii: ",") { end += 1 }
                        var lo = start, hi = end
                        while lo < hi, HTTPSyntax.isOWS(value[lo]) { lo += 1 }
                        while hi > lo, HTTPSyntax.isOWS(value[hi - 1]) { hi -= 1 }
                        if hi - lo == wanted.count, (0..<wanted.count).allSatisfy({
                            HTTPSyntax.asciiLowercase(value[lo + $0]) == HTTPSyntax.asciiLowercase(wanted[$0])
                        }) {
                            return true
                        }
                        start = end + 1
                    }
                    return false
                }
                if found { return true }
            }
            return false
        }
    }

    /// The value of the only field named `name`: nil when there is none or more than one.
    public func onlyValue(for name: String) -> String? {
        var found: String?
        for field in fields where HTTPSyntax.equalsIgnoringASCIICase(field.name, name) {
            if found != nil { return nil }
            found = field.value
        }
        return found
    }

    /// The number of fields (duplicates counted separately).
    public var count: Int { fields.count }

    /// Iterates over the fields in order, duplicates included.
    public func makeIterator() -> IndexingIterator<[Element]> { fields.makeIterator() }

    /// Equal when both hold the same fields in the same order; names compare
    /// case-insensitively, values exactly.
    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.fields.count == rhs.fields.count
            && zip(lhs.fields, rhs.fields).allSatisfy {
                HTTPSyntax.equalsIgnoringASCIICase($0.name, $1.name) && $0.value == $1.value
            }
    }
}
