import Foundation
import Testing
import SwitchboardCore

/// The one error body of every rejection: `{"error":{"message","type","code"}}`, with `type` from
/// ``HTTPErrorType``'s vocabulary.
@Suite("Rejection bodies")
struct RejectionBodyTests {
    static let parseErrors: [HTTPParseError] = [
        .headTooLarge, .tooManyHeaders, .malformedStartLine, .invalidVersion, .invalidStatus,
        .malformedHeaderLine, .obsoleteLineFolding, .invalidHeaderName, .invalidHeaderValue, .bareCarriageReturn,
    ]

    static let handshakeErrors: [WebSocketHandshakeError] = [
        .badMethod, .badVersion, .missingUpgrade, .missingConnectionUpgrade, .missingHost,
        .unsupportedWebSocketVersion, .badKey, .badSubprotocol,
    ]

    /// The `error` object of `body`, after checking that the body has exactly the keys
    /// `error.message` (string), `error.type` (string) and `error.code` (string or null).
    static func errorObject(_ body: [UInt8], sourceLocation: SourceLocation = #_sourceLocation)
        throws -> [String: Any] {
        let top = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
                               sourceLocation: sourceLocation)
        #expect(Set(top.keys) == ["error"], sourceLocation: sourceLocation)
        let error = try #require(top["error"] as? [String: Any], sourceLocation: sourceLocation)
        #expect(Set(error.keys) == ["message", "type", "code"], sourceLocation: sourceLocation)
        #expect(!((error["message"] as? String) ?? "").isEmpty, sourceLocation: sourceLocation)
        #expect(error["type"] is String, sourceLocation: sourceLocation)
        #expect(error["code"] is String || error["code"] is NSNull, sourceLocation: sourceLocation)
        return error
    }

    @Test func parseErrorsUseTheOneBody() throws {
        for error in Self.parseErrors {
            let response = error.response
            #expect(response.status == error.status)
            #expect(response.headers["Content-Type"] == "application/json")
            let object = try Self.errorObject(response.body)
            #expect(object["type"] as? String == HTTPErrorType.invalidRequest.rawValue, "\(error)")
            #expect(object["message"] as? String == error.description)
            #expect((object["code"] as? String)?.isEmpty == false, "\(error)")
        }
    }

    @Test func handshakeErrorsUseTheOneBody() throws {
        for error in Self.handshakeErrors {
            let response = try #require(error.response, "\(error)")
            #expect(response.headers["Content-Type"] == "application/json")
            let object = try Self.errorObject(response.body)
            #expect(object["type"] as? String == HTTPErrorType.invalidRequest.rawValue, "\(error)")
            #expect(object["message"] as? String == error.description)
            #expect((object["code"] as? String)?.isEmpty == false, "\(error)")
        }
    }

    @Test func builderKeepsTheShapeForEveryNamedTypeAndANullCode() throws {
        let types: [HTTPErrorType] = [.invalidRequest, .authentication, .permission, .notFound, .rateLimit,
                                      .internalServer, .overloaded, "custom_error"]
        for type in types {
            let object = try Self.errorObject(HTTPResponse.error(status: 400, message: "m", type: type).body)
            #expect(object["type"] as? String == type.rawValue)
            #expect(object["code"] is NSNull)
        }
    }

    @Test func namedTypesHaveTheDocumentedNames() {
        #expect(HTTPErrorType.invalidRequest.rawValue == "invalid_request_error")
        #expect(HTTPErrorType.authentication.rawValue == "authentication_error")
        #expect(HTTPErrorType.permission.rawValue == "permission_error")
        #expect(HTTPErrorType.notFound.rawValue == "not_found_error")
        #expect(HTTPErrorType.rateLimit.rawValue == "rate_limit_error")
        #expect(HTTPErrorType.internalServer.rawValue == "internal_server_error")
        #expect(HTTPErrorType.overloaded.rawValue == "overloaded_error")
        #expect(HTTPErrorType("x") == HTTPErrorType(rawValue: "x"))
    }
}
