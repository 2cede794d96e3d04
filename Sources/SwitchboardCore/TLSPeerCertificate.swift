/// The certificate a TLS peer presented and that was verified against the trust roots: on a
/// server with client certificates requested or required, the client's (see
/// ``WebSocketUpgradeRequest/clientCertificate``).
///
/// A reference type so that a request without one costs a connection a single word.
public final class TLSPeerCertificate: Sendable, Equatable, CustomStringConvertible {
    /// One entry of the certificate's subject alternative name extension.
    public enum AlternativeName: Sendable, Hashable, CustomStringConvertible {
        /// A DNS name (`dNSName`).
        case dns(String)
        /// An IPv4 or IPv6 address in text form (`iPAddress`).
        case ip(String)
        /// An e-mail address (`rfc822Name`).
        case email(String)
        /// A URI (`uniformResourceIdentifier`), e.g. a SPIFFE id.
        case uri(String)

        /// OpenSSL's notation: `DNS:…`, `IP:…`, `email:…`, `URI:…`.
        public var description: String {
            switch self {
            case .dns(let value): "DNS:\(value)"
            case .ip(let value): "IP:\(value)"
            case .email(let value): "email:\(value)"
            case .uri(let value): "URI:\(value)"
            }
        }

        /// Parses OpenSSL's notation (the form ``description`` gives); nil for anything else.
        public init?(_ text: String) {
            guard let colon = text.firstIndex(of: ":") else { return nil }
            let value = String(text[text.index(after: colon)...])
            switch text[..<colon] {
            case "DNS": self = .dns(value)
            case "IP": self = .ip(value)
            case "email": self = .email(value)
            case "URI": self = .uri(value)
            default: return nil
            }
        }
    }

    /// The subject as an RFC 4514 string, most specific attribute first: `CN=alice,O=Example`.
    public let subject: String
    /// The subject alternative names, in certificate order (kinds other than these four are
    /// left out).
    public let alternativeNames: [AlternativeName]

    /// Creates the value the server hands to `authenticate` (tests make their own).
    public init(subject: String, alternativeNames: [AlternativeName] = []) {
        self.subject = subject
        self.alternativeNames = alternativeNames
    }

    /// The DNS names among ``alternativeNames``.
    public var dnsNames: [String] {
        alternativeNames.compactMap { if case .dns(let name) = $0 { name } else { nil } }
    }

    /// The value of the subject's first `CN` attribute, if any (RFC 4514 escapes undone for
    /// `\,`, `\+`, `\"`, `\\`, `\<`, `\>`, `\;`, `\=`, `\#` and a leading or trailing space).
    public var commonName: String? {
        var attribute = ""
        var escaped = false
        var attributes: [String] = []
        for character in subject {
            if escaped {
                attribute.append(character)
                escaped = false
            } else if character == "\\" {
                attribute.append(character)
                escaped = true
            } else if character == "," || character == "+" {
                attributes.append(attribute)
                attribute = ""
            } else {
                attribute.append(character)
            }
        }
        attributes.append(attribute)
        guard let first = attributes.first(where: { $0.hasPrefix("CN=") }) else { return nil }
        var value = ""
        var pendingEscape = false
        for character in first.dropFirst(3) {
            if pendingEscape {
                value.append(character)
                pendingEscape = false
            } else if character == "\\" {
                pendingEscape = true
            } else {
                value.append(character)
            }
        }
        return value
    }

    /// `subject` and the alternative names.
    public var description: String {
        alternativeNames.isEmpty
            ? subject
            : "\(subject) (\(alternativeNames.map(\.description).joined(separator: ", ")))"
    }

    /// Equal subjects and alternative names.
    public static func == (a: TLSPeerCertificate, b: TLSPeerCertificate) -> Bool {
        a.subject == b.subject && a.alternativeNames == b.alternativeNames
    }
}
