import Foundation

/// A typed command sent as one text message; a trailing newline is appended if absent, so
/// newline-delimited peers see one command per line.
public protocol SocketCommand: Sendable {
    /// The command's text (usually one JSON object).
    var message: String { get }
}

extension SocketCommand {
    /// ``message`` with exactly one trailing newline guaranteed.
    public var line: String {
        message.hasSuffix("\n") ? message : message + "\n"
    }
}

/// A command that is its own JSON encoding: conform an `Encodable` type and it is sent as one
/// compact JSON line (`message` is derived; don't implement it).
public protocol JSONSocketCommand: SocketCommand, Encodable {}

extension JSONSocketCommand {
    /// The value encoded as compact JSON with sorted keys and unescaped slashes (`{}` if encoding
    /// fails); one line, since compact JSON never contains a raw newline.
    public var message: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // JSONEncoder never emits raw newlines for compact output, so this is one line.
        guard let data = try? encoder.encode(self) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}
