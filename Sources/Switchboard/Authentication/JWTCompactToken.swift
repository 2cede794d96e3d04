#if JWTSupport
import Foundation

/// A token's parts, decoded and pre-checked before any signature work (RFC 7515 §5.2, RFC 7519
/// §7.2): at most ``maxLength`` bytes, three base64url parts, a JSON object header with a
/// supported `alg` (never `none`) and no `crit`; the payload is parsed by ``payloadObject()``
/// (a JWS signature can be checked over any payload: RFC 8037's example signs plain text).
///
/// Not `Sendable` (JSON values as `Any`): made and used inside one verification.
struct JWTCompactToken {
    /// Tokens larger than this are refused unread: 8 KiB fits any sensible identity token (a
    /// few hundred bytes usually; RS512 signatures are 683 characters) and stays far below the
    /// upgrade request's header limit, while bounding the JSON and signature work a stranger can ask for.
    static let maxLength = 8 * 1024

    /// The algorithms verified (jwt-kit implements each); anything else, `none` included, is refused.
    static let supportedAlgorithms: Set<String> = [
        "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "ES512", "EdDSA",
    ]

    let header: [String: Any]
    /// The decoded payload bytes; ``payloadObject()`` parses them.
    let payloadBytes: [UInt8]
    /// The signed bytes: the first two parts and the dot between them, as received.
    let signingInput: ArraySlice<UInt8>
    /// The decoded signature.
    let signature: [UInt8]
    /// The header's `alg`, one of ``supportedAlgorithms``.
    let algorithm: String
    /// The header's `kid`, if any.
    let keyID: String?

    init(_ token: String) throws(JWTVerificationError) {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxLength else { throw .invalid("token larger than 8 KiB") }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .invalid("not a JWS compact serialization: expected three parts separated by dots") }
        guard let headerBytes = Self.base64URLDecoded(parts[0]), let payloadBytes = Self.base64URLDecoded(parts[1]),
              let signature = Self.base64URLDecoded(parts[2]) else {
            throw .invalid("malformed base64url")
        }
        guard let header = Self.jsonObject(headerBytes) else { throw .invalid("the header is not a JSON object") }
        guard let algorithm = header["alg"] as? String else { throw .invalid("the header has no alg") }
        if algorithm.lowercased() == "none" { throw .invalid("unsigned tokens (alg none) are not accepted") }
        guard Self.supportedAlgorithms.contains(algorithm) else { throw .invalid("unsupported algorithm") }
        if header["crit"] != nil {
            // RFC 7515 §4.1.11: every listed extension must be understood; we implement none.
            throw .invalid("unsupported critical header parameter (crit)")
        }
        let keyID = header["kid"]
        guard keyID == nil || keyID is String else { throw .invalid("the header's kid is not a string") }
        guard !signature.isEmpty else { throw .invalid("the token has no signature") }
        self.header = header
        self.payloadBytes = payloadBytes
        self.signingInput = bytes[..<(parts[0].count + 1 + parts[1].count)]
        self.signature = signature
        self.algorithm = algorithm
        self.keyID = keyID as? String
    }

    /// The payload as a JSON object (RFC 7519 §7.2 step 10: a JWT's payload is a JSON object).
    func payloadObject() throws(JWTVerificationError) -> [String: Any] {
        guard let payload = Self.jsonObject(payloadBytes) else { throw .invalid("the payload is not a JSON object") }
        return payload
    }

    /// Unpadded base64url (RFC 7515 §2) decoded strictly: only the URL-safe alphabet, no `=`,
    /// no impossible length; nil otherwise.
    static func base64URLDecoded(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        guard text.count % 4 != 1 else { return nil }
        var standard = [UInt8]()
        standard.reserveCapacity(text.count + 3)
        for byte in text {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.append(byte)
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            default: return nil
            }
        }
        while standard.count % 4 != 0 { standard.append(UInt8(ascii: "=")) }
        guard let data = Data(base64Encoded: Data(standard)) else { return nil }
        return Array(data)
    }

    /// The bytes parsed as a JSON object, or nil (another JSON value, or not JSON).
    private static func jsonObject(_ bytes: [UInt8]) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    /// Compact JSON text of a claim value (sorted keys, `/` unescaped): how non-string claims
    /// reach ``VerifiedToken/claims``.
    static func jsonText(_ value: Any) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: value,
                                                     options: [.fragmentsAllowed, .sortedKeys, .withoutEscapingSlashes]) else {
            return "null"
        }
        return String(decoding: data, as: UTF8.self)
    }
}

#endif
