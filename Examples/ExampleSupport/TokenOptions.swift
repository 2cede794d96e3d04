import ArgumentParser
import Dispatch
import Foundation
import Logging
import Switchboard

/// The example servers' signed-token flags: one key source (`--jwt-secret-file`,
/// `--jwt-public-key` or `--jwks-file`) and the optional `--jwt-issuer` / `--jwt-audience`.
///
/// With a key source each client proves who it is with its own JWT, so identities (`sub`)
/// come from the token instead of from what the client types; they exclude the shared
/// `--token`, which would give everyone the same identity. The flags exist in every build;
/// a build without the `JWTSupport` trait refuses them (exit 64).
package struct TokenOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Verify clients' JWTs with the HMAC secret in this file (HS256/384/512).",
                               discussion: "Raw bytes, one trailing newline ignored. Re-read on SIGHUP."))
    package var jwtSecretFile: String?
    @Option(help: ArgumentHelp("Verify clients' JWTs with this PEM public key (RSA, EC P-256/384/521 or Ed25519).",
                               discussion: "Re-read on SIGHUP."))
    package var jwtPublicKey: String?
    @Option(help: ArgumentHelp("Verify clients' JWTs with the keys of this JWK Set file, chosen by kid.",
                               discussion: "Several keys for rotation. Re-read on SIGHUP."))
    package var jwksFile: String?
    @Option(help: "Require this `iss` claim in clients' JWTs.")
    package var jwtIssuer: String?
    @Option(help: "Require this audience in clients' JWTs' `aud` claim.")
    package var jwtAudience: String?

    package init() {}

    /// True when a key flag is given: clients must then present a valid JWT.
    package var isEnabled: Bool { keyFlagCount > 0 }

    private var keyFlagCount: Int { [jwtSecretFile, jwtPublicKey, jwksFile].count { $0 != nil } }

    /// Checks the flags together with the command's shared `--token` (a `ValidationError`, exit
    /// 64, when both are given, when more than one key flag is, when `--jwt-issuer` or
    /// `--jwt-audience` comes without a key, or when the build lacks the `JWTSupport` trait).
    package func validate(sharedToken: String?) throws {
        if keyFlagCount > 1 {
            throw ValidationError("--jwt-secret-file, --jwt-public-key and --jwks-file exclude each other: give one")
        }
        if !isEnabled {
            if jwtIssuer != nil || jwtAudience != nil {
                throw ValidationError("--jwt-issuer and --jwt-audience need a key: --jwt-secret-file, --jwt-public-key or --jwks-file")
            }
            return
        }
        if sharedToken != nil {
            throw ValidationError("--token (one secret shared by every client) excludes the JWT flags (one identity per client)")
        }
        #if !JWTSupport
        throw ValidationError("the JWT flags need a build with the JWTSupport trait (this one was built without JWTSupport)")
        #endif
    }

    #if JWTSupport
    /// The key source the flags name, or nil without a key flag.
    package var keySource: JWTKeySource? {
        if let jwtSecretFile { return .secretFile(jwtSecretFile) }
        if let jwtPublicKey { return .publicKeyFile(jwtPublicKey) }
        if let jwksFile { return .jwksFile(jwksFile) }
        return nil
    }

    /// The authenticator for the flags (keys loaded now), or nil without a key flag.
    /// - Throws: when the key file cannot be read or holds no usable key.
    package func makeAuthenticator() async throws -> JWTAuthenticator? {
        guard let keySource else { return nil }
        return try await JWTAuthenticator(keys: keySource, issuer: jwtIssuer, audience: jwtAudience)
    }

    /// From now on, `SIGHUP` makes `authenticator` re-read its key file; success and failure are
    /// logged (file names only, never key material). A failed reload keeps the old keys.
    package func reloadOnHangUp(_ authenticator: JWTAuthenticator, logger: Logger = Logger(label: "jwt")) {
        HangUpReloads.shared.add {
            do {
                try await authenticator.reload()
                logger.notice("SIGHUP: JWT keys reloaded")
            } catch {
                logger.error("SIGHUP: JWT keys not reloaded, the previous keys stay in use: \(error)")
            }
        }
    }
    #endif
}

#if JWTSupport
/// The process's `SIGHUP` handlers: one dispatch signal source, kept for the process's life.
private final class HangUpReloads: Sendable {
    static let shared = HangUpReloads()

    private let actions = Protected<[@Sendable () async -> Void]>([])
    private let source = Protected<DispatchSourceSignal?>(nil)

    func add(_ action: @escaping @Sendable () async -> Void) {
        actions.withLock { $0.append(action) }
        source.withLock { source in
            guard source == nil else { return }
            signal(SIGHUP, SIG_IGN)
            let created = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "jwt.sighup"))
            created.setEventHandler { [actions] in
                let current = actions.withLock { $0 }
                Task { for action in current { await action() } }
            }
            created.resume()
            source = created
        }
    }
}
#endif
