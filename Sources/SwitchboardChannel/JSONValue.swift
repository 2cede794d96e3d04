import Switchboard
import SwitchboardCore
import Foundation

/// Any JSON value: the free-form `input` of tool calls and permission requests.
///
/// Numbers are `Double` (JSON has one number type). Encoding via ``jsonText`` is compact,
/// one line, with object keys sorted, so it is deterministic.
public enum JSONValue: Codable, Sendable, Equatable, Hashable {
    /// A JSON object (member order is not kept).
    case object([String: JSONValue])
    /// A JSON array.
    case array([JSONValue])
    /// A JSON string.
    case string(String)
    /// A JSON number (integers beyond 2^53 lose precision).
    case number(Double)
    /// `true` or `false`.
    case bool(Bool)
    /// `null`.
    case null

    /// Decodes any JSON value from a single-value container.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let b = try? container.decode(Bool.self) {
            self = .bool(b)
        } else if let n = try? container.decode(Double.self) {
            self = .number(n)
        } else if let s = try? container.decode(String.self) {
            self = .string(s)
        } else if let a = try? container.decode([JSONValue].self) {
            self = .array(a)
        } else if let o = try? container.decode([String: JSONValue].self) {
            self = .object(o)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    /// Encodes the value into a single-value container.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .object(let o): try container.encode(o)
        case .array(let a): try container.encode(a)
        case .string(let s): try container.encode(s)
        case .number(let n): try container.encode(n)
        case .bool(let b): try container.encode(b)
        case .null: try container.encodeNil()
        }
    }

    /// Parses one JSON text (any value at the top level).
    public init(parsing data: Data) throws {
        self = try JSONDecoder().decode(JSONValue.self, from: data)
    }

    /// The string, if this is a ``string(_:)``.
    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    /// The number, if this is a ``number(_:)``.
    public var numberValue: Double? { if case .number(let n) = self { n } else { nil } }
    /// The Boolean, if this is a ``bool(_:)``.
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
    /// The elements, if this is an ``array(_:)``.
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { a } else { nil } }
    /// The members, if this is an ``object(_:)``.
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { o } else { nil } }
    /// Whether this is ``null``.
    public var isNull: Bool { self == .null }

    /// The member `key` of an object (nil for other values or a missing key).
    public subscript(key: String) -> JSONValue? { objectValue?[key] }

    /// Compact one-line JSON text, object keys sorted.
    public var jsonText: String {
        var out = ""
        write(into: &out)
        return out
    }

    func write(into out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let n): out += JSONText.number(n)
        case .string(let s): out += JSONText.string(s)
        case .array(let a):
            out += "["
            for (i, v) in a.enumerated() {
                if i > 0 { out += "," }
                v.write(into: &out)
            }
            out += "]"
        case .object(let o):
            out += "{"
            for (i, entry) in o.sorted(by: { $0.key < $1.key }).enumerated() {
                if i > 0 { out += "," }
                out += JSONText.string(entry.key)
                out += ":"
                entry.value.write(into: &out)
            }
            out += "}"
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral {
    /// `"text"` is ``string(_:)``.
    public init(stringLiteral value: String) { self = .string(value) }
    /// `42` is ``number(_:)``.
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    /// `0.5` is ``number(_:)``.
    public init(floatLiteral value: Double) { self = .number(value) }
    /// `true` is ``bool(_:)``.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// `[1, "a"]` is ``array(_:)``.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// `["k": 1]` is ``object(_:)``; for a repeated key the last value wins.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    /// `nil` is ``null``.
    public init(nilLiteral: ()) { self = .null }
}

/// Writes JSON text with members in a fixed order (the wire order of the protocol docs).
enum JSONText {
    static func string(_ s: String) -> String { JSONString.quoted(s) }

    static func number(_ n: Double) -> String {
        guard n.isFinite else { return "null" }
        if n == n.rounded(), abs(n) < 9.007_199_254_740_992e15 { return String(Int64(n)) }
        return "\(n)"
    }

    /// `{"k1":v1,"k2":v2}` from already-encoded values, in the given order; nil values are omitted.
    static func object(_ members: [(String, String?)]) -> String {
        var out = "{"
        var first = true
        for (key, value) in members {
            guard let value else { continue }
            if !first { out += "," }
            first = false
            out += string(key) + ":" + value
        }
        return out + "}"
    }
}
