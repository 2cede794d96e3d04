import ArgumentParser
import Foundation
import Switchboard
import SwitchboardCore

/// The example servers' `--api-key-file FILE`: the secret a backend presents as
/// `Authorization: Bearer <key>` to the HTTP API (and to `GET /metrics`).
///
/// The file is read once, at start; surrounding whitespace (a trailing newline) is trimmed and
/// what remains must be at least ``APIKey/minimumLength`` bytes. The key is never logged nor
/// printed (``APIKey``'s descriptions are redacted).
package struct APIKeyOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Enable the HTTP API for backends holding the key in this file (Authorization: Bearer <key>).",
        discussion: "Read at start, whitespace trimmed, at least 16 bytes; never logged. Also protects GET /metrics."))
    package var apiKeyFile: String?

    package init() {}

    /// The key of `--api-key-file`, or nil without the flag.
    /// - Throws: a `ValidationError` (exit 64) when the file cannot be read or the key is too short.
    package func loadKey() throws -> APIKey? {
        guard let apiKeyFile else { return nil }
        do {
            return try APIKey(contentsOfFile: apiKeyFile)
        } catch {
            throw ValidationError("--api-key-file: \(error)")
        }
    }
}

/// An API key: compared in constant time, never shown.
package struct APIKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// Shortest key accepted, in bytes: 16 random bytes (128 bits) is the least a guess-proof
    /// secret needs; `openssl rand -hex 32` makes a good one.
    package static let minimumLength = 16
    /// Longest key accepted, in bytes: far beyond any real key, and a bound on what a file can make
    /// the server compare per request.
    package static let maximumLength = 4096

    private let bytes: [UInt8]

    /// Why a key file was refused (no key material in the message).
    package struct LoadError: Error, CustomStringConvertible {
        /// What went wrong, with the file's path.
        package var description: String
    }

    /// A key from its text: whitespace around it trimmed, ``minimumLength`` to ``maximumLength`` bytes.
    package init(_ text: String) throws(LoadError) {
        let key = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard key.utf8.count >= Self.minimumLength else {
            throw LoadError(description: "the key is shorter than \(Self.minimumLength) bytes")
        }
        guard key.utf8.count <= Self.maximumLength else {
            throw LoadError(description: "the key is longer than \(Self.maximumLength) bytes")
        }
        guard !key.unicodeScalars.contains(where: { $0.properties.generalCategory == .control || $0 == " " }) else {
            throw LoadError(description: "the key contains spaces or control characters")
        }
        bytes = Array(key.utf8)
    }

    /// The key in `path` (see ``init(_:)``).
    package init(contentsOfFile path: String) throws(LoadError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw LoadError(description: "\(path): cannot be read")
        }
        guard data.count <= Self.maximumLength + 1024, let text = String(data: data, encoding: .utf8) else {
            throw LoadError(description: "\(path): not a UTF-8 text key of at most \(Self.maximumLength) bytes")
        }
        do {
            try self.init(text)
        } catch {
            throw LoadError(description: "\(path): \(error.description)")
        }
    }

    /// True when `presented` is the key; the time taken depends only on the lengths.
    package func matches(_ presented: String) -> Bool {
        ConstantTime.equals(Array(presented.utf8), bytes)
    }

    /// Redacted.
    package var description: String { "APIKey(redacted)" }
    /// Redacted.
    package var debugDescription: String { description }
}

/// Who may use an example server's HTTP API: holders of the ``APIKey``, and (with the token
/// flags) bearers of a verified token granting the scope asked for.
package struct APIAccess: Sendable {
    /// Verifies a bearer token: its claims (strings as they are, other values as compact JSON
    /// text), or the reason it was refused.
    package typealias TokenVerifier = @Sendable (String) async -> Result<[String: String], TokenRefusal>

    /// Why a token was refused (`invalid_token`, `token_expired`…), shown to the client.
    package struct TokenRefusal: Error, Sendable {
        /// Machine-readable code.
        package var code: String
        /// Human-readable reason (never the token).
        package var message: String
        /// A refusal with its code and message.
        package init(code: String, message: String) { self.code = code; self.message = message }
    }

    /// The outcome of ``check(_:scope:)``.
    package enum Decision: Sendable {
        /// The request may proceed.
        case allowed
        /// Refused with this answer (401 or 403, JSON error body).
        case denied(HTTPResponse)
    }

    /// The key of `--api-key-file`, if any.
    package let key: APIKey?
    /// The token verifier of the token flags, if any.
    package let verifyToken: TokenVerifier?

    /// Access by `key` and/or tokens verified by `verifyToken`.
    package init(key: APIKey?, verifyToken: TokenVerifier?) {
        self.key = key
        self.verifyToken = verifyToken
    }

    /// Whether any credential is configured: without one the API is off (404).
    package var isEnabled: Bool { key != nil || verifyToken != nil }

    /// Checks `head`'s `Authorization: Bearer …` (the header only: a secret in a URL ends up in
    /// logs): the key, else a token whose `scope` claim (space-separated) or `scopes` claim
    /// (array) holds `scope`. No or a wrong credential: `401`; a valid token without the scope:
    /// `403`.
    package func check(_ head: HTTPRequestHead, scope: String) async -> Decision {
        guard let presented = Self.bearer(head), !presented.isEmpty else {
            return .denied(Self.unauthorized("missing bearer credential: send Authorization: Bearer <key>",
                                             code: "missing_credential"))
        }
        if let key, key.matches(presented) { return .allowed }
        guard let verifyToken else {
            return .denied(Self.unauthorized("invalid API key", code: "invalid_api_key"))
        }
        // Not a token at all (a wrong key on a server with both): say so without verifying.
        guard presented.utf8.count <= 8192, presented.split(separator: ".", omittingEmptySubsequences: false).count == 3 else {
            return .denied(Self.unauthorized(key != nil ? "invalid API key or token" : "invalid token",
                                             code: key != nil ? "invalid_api_key" : "invalid_token"))
        }
        switch await verifyToken(presented) {
        case .failure(let refusal):
            return .denied(Self.unauthorized(refusal.message, code: refusal.code))
        case .success(let claims):
            guard Self.grants(claims, scope: scope) else {
                return .denied(.error(status: 403, message: "the token lacks the '\(scope)' scope",
                                      type: .permission, code: "insufficient_scope"))
            }
            return .allowed
        }
    }

    /// Checks `head` against the key alone (for `/metrics`): allowed without a key.
    package func checkKey(_ head: HTTPRequestHead) -> Decision {
        guard let key else { return .allowed }
        guard let presented = Self.bearer(head), key.matches(presented) else {
            return .denied(Self.unauthorized("missing or invalid API key: send Authorization: Bearer <key>",
                                             code: "invalid_api_key"))
        }
        return .allowed
    }

    /// Whether verified `claims` grant `scope`: in `scope` (a space-separated string, RFC 8693
    /// §4.2) or in `scopes` (a JSON array of strings).
    package static func grants(_ claims: [String: String], scope: String) -> Bool {
        if let list = claims["scope"], list.split(whereSeparator: { $0 == " " }).contains(where: { $0 == scope }) {
            return true
        }
        if let array = claims["scopes"], let data = array.data(using: .utf8),
           let scopes = try? JSONDecoder().decode([String].self, from: data), scopes.contains(scope) {
            return true
        }
        return false
    }

    /// The credential of an `Authorization: Bearer …` header.
    static func bearer(_ head: HTTPRequestHead) -> String? {
        guard let auth = head.headers["authorization"] else { return nil }
        let parts = auth.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return parts[1].trimmingCharacters(in: .whitespaces)
    }

    private static func unauthorized(_ message: String, code: String) -> HTTPResponse {
        var response = HTTPResponse.error(status: 401, message: message, type: .authentication, code: code)
        response.headers.replaceOrAdd(name: "WWW-Authenticate", value: "Bearer")
        return response
    }
}
