import ExampleSupport
import Foundation
import Switchboard
import SwitchboardCore
import Testing

/// The HTTP API's access rules (ExampleSupport's `APIKey` and `APIAccess`), in-process: the key
/// compared whole, tokens needing the scope in `scope` or `scopes`, the right status for each
/// refusal. The token verifier is a stand-in here (the JWT verification itself is
/// JWTAuthenticator's, tested in SwitchboardTests).
@Suite struct APIAccessTests {
    static let key = "0123456789abcdef-key"

    static func head(_ authorization: String?) -> HTTPRequestHead {
        var headers = HTTPHeaders()
        if let authorization { headers.add(name: "Authorization", value: authorization) }
        return HTTPRequestHead(method: "POST", target: "/v1/rooms/r/messages", headers: headers)
    }

    /// A verifier accepting `good.<payload>.sig` tokens with fixed claims per payload.
    static let verifier: APIAccess.TokenVerifier = { token in
        switch token {
        case "a.scope-string.s": return .success(["scope": "read publish admin"])
        case "a.scope-array.s": return .success(["scopes": #"["read","publish"]"#])
        case "a.read-only.s": return .success(["scope": "read publisher", "scopes": #"["read"]"#])
        case "a.no-scope.s": return .success([:])
        default: return .failure(.init(code: "invalid_token", message: "signature mismatch"))
        }
    }

    static func status(_ decision: APIAccess.Decision) -> Int {
        switch decision {
        case .allowed: return 200
        case .denied(let response): return response.status
        }
    }

    @Test func theKeyIsTrimmedAndMustBeLongEnough() throws {
        #expect(throws: APIKey.LoadError.self) { try APIKey("short") }
        #expect(throws: APIKey.LoadError.self) { try APIKey("   sixteen-bytes-but-has space   ") }
        let key = try APIKey("\n  \(Self.key)\n")
        #expect(key.matches(Self.key))
        #expect(!key.matches(Self.key + "x") && !key.matches(String(Self.key.dropLast())) && !key.matches(""))
        #expect("\(key)" == "APIKey(redacted)" && !String(reflecting: key).contains(Self.key))
    }

    @Test func keyOnly() async throws {
        let access = APIAccess(key: try APIKey(Self.key), verifyToken: nil)
        #expect(access.isEnabled)
        #expect(Self.status(await access.check(Self.head("Bearer \(Self.key)"), scope: "publish")) == 200)
        #expect(Self.status(await access.check(Self.head("bearer \(Self.key)"), scope: "publish")) == 200)
        #expect(Self.status(await access.check(Self.head(nil), scope: "publish")) == 401)
        #expect(Self.status(await access.check(Self.head("Basic \(Self.key)"), scope: "publish")) == 401)
        #expect(Self.status(await access.check(Self.head("Bearer wrong"), scope: "publish")) == 401)
        // Something shaped like a token is not verified without the token flags.
        #expect(Self.status(await access.check(Self.head("Bearer a.scope-string.s"), scope: "publish")) == 401)
        if case .denied(let response) = await access.check(Self.head(nil), scope: "publish") {
            #expect(response.headers["WWW-Authenticate"] == "Bearer")
            #expect(String(decoding: response.body, as: UTF8.self).contains(#""type":"authentication_error""#))
        }
        // /metrics: the key, or nothing without one.
        #expect(Self.status(access.checkKey(Self.head("Bearer \(Self.key)"))) == 200)
        #expect(Self.status(access.checkKey(Self.head(nil))) == 401)
        #expect(Self.status(APIAccess(key: nil, verifyToken: Self.verifier).checkKey(Self.head(nil))) == 200)
        #expect(!APIAccess(key: nil, verifyToken: nil).isEnabled)
    }

    @Test func tokensNeedThePublishScope() async throws {
        let access = APIAccess(key: nil, verifyToken: Self.verifier)
        #expect(Self.status(await access.check(Self.head("Bearer a.scope-string.s"), scope: "publish")) == 200)
        #expect(Self.status(await access.check(Self.head("Bearer a.scope-array.s"), scope: "publish")) == 200)
        // "publisher" is not "publish"; a `scopes` array without it neither.
        #expect(Self.status(await access.check(Self.head("Bearer a.read-only.s"), scope: "publish")) == 403)
        #expect(Self.status(await access.check(Self.head("Bearer a.no-scope.s"), scope: "publish")) == 403)
        #expect(Self.status(await access.check(Self.head("Bearer a.forged.s"), scope: "publish")) == 401)
        #expect(Self.status(await access.check(Self.head("Bearer not-a-token"), scope: "publish")) == 401)
        if case .denied(let response) = await access.check(Self.head("Bearer a.no-scope.s"), scope: "publish") {
            #expect(String(decoding: response.body, as: UTF8.self).contains(#""code":"insufficient_scope""#))
        }
    }

    @Test func keyAndTokensTogether() async throws {
        let access = APIAccess(key: try APIKey(Self.key), verifyToken: Self.verifier)
        #expect(Self.status(await access.check(Self.head("Bearer \(Self.key)"), scope: "publish")) == 200)
        #expect(Self.status(await access.check(Self.head("Bearer a.scope-array.s"), scope: "publish")) == 200)
        #expect(Self.status(await access.check(Self.head("Bearer a.no-scope.s"), scope: "publish")) == 403)
        #expect(Self.status(await access.check(Self.head("Bearer wrong-key"), scope: "publish")) == 401)
        // A token does not open /metrics when a key is set.
        #expect(Self.status(access.checkKey(Self.head("Bearer a.scope-array.s"))) == 401)
    }

    @Test func scopesClaimShapes() {
        #expect(APIAccess.grants(["scope": "publish"], scope: "publish"))
        #expect(APIAccess.grants(["scope": "a  publish b"], scope: "publish"))
        #expect(!APIAccess.grants(["scope": "publish-all"], scope: "publish"))
        #expect(APIAccess.grants(["scopes": #"["publish"]"#], scope: "publish"))
        #expect(!APIAccess.grants(["scopes": #""publish""#], scope: "publish"))
        #expect(!APIAccess.grants(["scopes": "[1,2]"], scope: "publish"))
        #expect(!APIAccess.grants([:], scope: "publish"))
    }
}
