#if JWTSupport
import Crypto
import Foundation

/// JSON Web Tokens for tests: HS256 signed here (swift-crypto's HMAC), every other algorithm
/// signed by PyJWT in a `python3` subprocess (`scripts/lib/deps.sh`'s `ensure_python_jwt`
/// installs it), so that the library is checked against an independent implementation.
package enum TestTokens {
    /// A failure to make a token (bad claims, PyJWT missing or failing).
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// An HS256 token with these claims, signed with the UTF-8 bytes of `secret`.
    ///
    /// `claims` must be JSON-serializable (strings, numbers, booleans, arrays, dictionaries);
    /// `header` adds fields to `{"alg":"HS256","typ":"JWT"}` (e.g. `kid`, or `crit` to forge).
    /// Times: pass Unix seconds, e.g. `TestTokens.unixTime(Date() + 60)`.
    package static func hs256(secret: String, claims: [String: Any], header: [String: Any] = [:]) -> String {
        hs256(secret: Array(secret.utf8), claims: claims, header: header)
    }

    /// An HS256 token signed with the raw bytes of `secret`.
    package static func hs256(secret: [UInt8], claims: [String: Any], header: [String: Any] = [:]) -> String {
        var fullHeader: [String: Any] = ["alg": "HS256", "typ": "JWT"]
        for (key, value) in header { fullHeader[key] = value }
        let input = base64URL(json(fullHeader)) + "." + base64URL(json(claims))
        return input + "." + base64URL(hmacSHA256(Array(input.utf8), key: secret))
    }

    /// An HS256 token over header and payload bytes given as they are (any JSON, or not JSON):
    /// correctly signed tokens whose only fault is their shape.
    package static func hs256(secret: String, rawHeader: String, rawPayload: String) -> String {
        let input = base64URL(Array(rawHeader.utf8)) + "." + base64URL(Array(rawPayload.utf8))
        return input + "." + base64URL(hmacSHA256(Array(input.utf8), key: Array(secret.utf8)))
    }

    /// A token signed by PyJWT: `jwt.encode(claims, key, algorithm=algorithm, headers=header)`,
    /// where `keyFile` holds the HMAC secret (raw bytes, one trailing newline ignored, as
    /// `JWTKeySource.secretFile` reads it) or the PEM private key.
    package static func pyjwt(algorithm: String, keyFile: String, claims: [String: Any],
                              header: [String: Any] = [:]) throws -> String {
        let script = """
            import json, sys, jwt
            claims, header = json.loads(sys.argv[3]), json.loads(sys.argv[4])
            key = open(sys.argv[2], 'rb').read()
            if sys.argv[1].startswith('HS') and key.endswith(b'\\n'): key = key[:-1]
            sys.stdout.write(jwt.encode(claims, key, algorithm=sys.argv[1], headers=header or None))
            """
        return try python(script, arguments: [algorithm, keyFile, String(decoding: json(claims), as: UTF8.self),
                                              String(decoding: json(header), as: UTF8.self)])
    }

    /// Runs `python3 -c script arguments…` and returns its standard output, trimmed.
    package static func python(_ script: String, arguments: [String] = []) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script] + arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = errors
        do {
            try process.run()
        } catch {
            throw Failure(description: "cannot start python3: \(error)")
        }
        // Both pipes read at once, so that neither can fill up while the other is drained.
        let errorText = TestLockedData()
        let errorReader = Thread { errorText.set(errors.fileHandleForReading.readDataToEndOfFile()) }
        errorReader.start()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let stderr = errorText.wait()
        guard process.terminationStatus == 0 else {
            throw Failure(description: "python3 failed (\(process.terminationStatus)): \(String(decoding: stderr, as: UTF8.self))")
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Unix seconds of `date`, as a JWT `exp`/`nbf`/`iat` value.
    package static func unixTime(_ date: Date) -> Int { Int(date.timeIntervalSince1970.rounded(.down)) }

    /// Base64url without padding (RFC 7515 §2).
    package static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Compact JSON of a JSON-serializable value (sorted keys, so tokens are reproducible).
    package static func json(_ value: Any) -> [UInt8] {
        guard let data = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed, .withoutEscapingSlashes]) else {
            preconditionFailure("TestTokens: claims are not JSON-serializable")
        }
        return Array(data)
    }

    private static func hmacSHA256(_ message: [UInt8], key: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)))
    }
}

/// Data written by one thread and awaited by another.
private final class TestLockedData: @unchecked Sendable {
    // Safety: `data` is only touched while `condition` is locked.
    private let condition = NSCondition()
    private var data: Data?

    func set(_ value: Data) {
        condition.lock()
        data = value
        condition.signal()
        condition.unlock()
    }

    func wait() -> Data {
        condition.lock()
        defer { condition.unlock() }
        while data == nil { condition.wait() }
        return data ?? Data()
    }
}

#endif
