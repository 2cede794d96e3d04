import Foundation

/// The passphrase of an encrypted private key. It never appears in descriptions, debugger
/// output, `dump` or logs: every textual form is `<redacted>`.
public struct TLSPassphrase: Sendable, Equatable, ExpressibleByStringLiteral, CustomStringConvertible,
    CustomDebugStringConvertible, CustomReflectable {
    /// The passphrase itself; read it only to hand it to OpenSSL.
    package let value: String

    /// A passphrase given in code or configuration.
    public init(_ value: String) { self.value = value }

    /// A passphrase literal (for tests; keep real ones out of source code).
    public init(stringLiteral value: String) { self.value = value }

    /// Reads the passphrase from the first line of a file (a trailing `\n` or `\r\n` is not
    /// part of it), e.g. a mounted secret.
    ///
    /// - Throws: ``SwitchboardError`` of kind `.invalidArgument` naming the file (never its
    ///   contents) when it cannot be read or is not UTF-8.
    public init(contentsOfFile path: String) throws(SwitchboardError) {
        guard let data = FileManager.default.contents(atPath: path),
              let text = String(data: data, encoding: .utf8) else {
            throw .invalidArgument("cannot read the passphrase file \(path)")
        }
        // By scalars: "\r\n" is one Character, so a Character split would miss it.
        let scalars = text.unicodeScalars
        let end = scalars.firstIndex(where: { $0 == "\n" || $0 == "\r" }) ?? scalars.endIndex
        self.value = String(scalars[..<end])
    }

    /// Always `<redacted>`.
    public var description: String { "<redacted>" }
    /// Always `<redacted>`.
    public var debugDescription: String { "<redacted>" }
    /// No children: `dump` shows nothing of the value.
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}
