import Testing
@testable import SwitchboardCore

@Suite("RFC 9110 §5 header fields")
struct HTTPHeadersTests {
    @Test func lookupIsCaseInsensitiveAndReturnsFirstValue() {
        let headers: HTTPHeaders = ["Host": "a", "X-Dup": "1", "x-dup": "2"]
        #expect(headers["host"] == "a")
        #expect(headers["HOST"] == "a")
        #expect(headers["X-DUP"] == "1")
        #expect(headers["missing"] == nil)
        #expect(headers.values(for: "x-Dup") == ["1", "2"])
        #expect(headers.values(for: "none") == [])
        #expect(headers.count == 3)
        #expect(headers.contains(name: "HOST"))
        #expect(!headers.contains(name: "Hos"))
    }

    @Test func orderAndDuplicatesArePreserved() {
        var headers = HTTPHeaders([("B", "1")])
        headers.add(name: "A", value: "2")
        headers.add(name: "b", value: "3")
        #expect(headers.map(\.name) == ["B", "A", "b"])
        #expect(headers.map(\.value) == ["1", "2", "3"])
    }

    @Test func tokensSplitTrimAndLowercaseAcrossFields() {
        let headers: HTTPHeaders = ["Connection": "keep-alive, Upgrade", "connection": " ,  CLOSE ,", "Other": "x"]
        #expect(headers.tokens(for: "connection") == ["keep-alive", "upgrade", "close"])
        #expect(headers.tokens(for: "missing") == [])
    }

    @Test func listElementsPreserveCase() {
        let headers: HTTPHeaders = ["Sec-WebSocket-Protocol": "Chat,\tSuperChat ", "sec-websocket-protocol": "v2.JSON"]
        #expect(headers.listElements(for: "Sec-WebSocket-Protocol") == ["Chat", "SuperChat", "v2.JSON"])
    }

    @Test func removeAndReplace() {
        var headers: HTTPHeaders = ["A": "1", "a": "2", "B": "3"]
        headers.replaceOrAdd(name: "A", value: "9")
        #expect(headers.values(for: "a") == ["9"])
        #expect(headers.map(\.name) == ["B", "A"])
        headers.remove(name: "b")
        #expect(headers.count == 1)
    }

    @Test func equalityComparesNamesCaseInsensitivelyAndValuesExactly() {
        #expect(HTTPHeaders([("Host", "x")]) == HTTPHeaders([("host", "x")]))
        #expect(HTTPHeaders([("Host", "x")]) != HTTPHeaders([("Host", "X")]))
        #expect(HTTPHeaders([("A", "1"), ("B", "2")]) != HTTPHeaders([("B", "2"), ("A", "1")]))
        #expect(HTTPHeaders([("A", "1")]) != HTTPHeaders([("A", "1"), ("A", "1")]))
    }

    @Test func nonASCIINamesNeverMatchByCaseFolding() {
        let headers: HTTPHeaders = ["Ä": "1"]
        #expect(headers["ä"] == nil)
        #expect(headers["Ä"] == "1")
    }

    /// The handshake's list-token test agrees with `tokens(for:).contains` on every case.
    @Test func containsListTokenAgreesWithTokens() {
        let values = ["Upgrade", "keep-alive, Upgrade", " upgrade ", "UPGRADE,", ",,upgrade,,", "upgrades",
                      "up grade", "keep-alive", "", ",", "\tUpgrade\t, x", "\"upgrade\"", "x,upgrade\""]
        for value in values {
            for fields in [[("Connection", value)], [("connection", "x"), ("CONNECTION", value)], [("Other", value)]] {
                let headers = HTTPHeaders(fields)
                #expect(headers.containsListToken("upgrade", in: "Connection")
                        == headers.tokens(for: "Connection").contains("upgrade"), "\(fields)")
            }
        }
    }

    @Test func onlyValueIsNilForNoneOrMany() {
        #expect(HTTPHeaders([("Host", "a")]).onlyValue(for: "host") == "a")
        #expect(HTTPHeaders([("Host", "a"), ("HOST", "b")]).onlyValue(for: "Host") == nil)
        #expect(HTTPHeaders([("X", "a")]).onlyValue(for: "Host") == nil)
        #expect(HTTPHeaders([("Host", "")]).onlyValue(for: "Host") == "")
    }
}

/// `tchar` (RFC 9110 §5.6.2), byte by byte against the RFC's own list.
@Suite struct TokenByteTests {
    @Test func everyByteIsATokenCharacterExactlyWhenTheRFCListsIt() {
        let tchar = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        for byte in UInt8.min...UInt8.max {
            #expect(HTTPSyntax.isTokenByte(byte) == tchar.contains(byte), "byte \(byte)")
        }
    }
}

/// What a connection keeps of its request's fields.
@Suite struct RemovingFieldsTests {
    @Test func namedFieldsGoCaseInsensitivelyAndTheRestKeepTheirOrder() {
        let long = String(repeating: "X", count: 70)
        let headers: HTTPHeaders = ["Host": "a", "upgrade": "websocket", "X-One": "1", "CONNECTION": "Upgrade",
                                    "Sec-WebSocket-Key": "k", "x-one": "2", long: "l", "Cookie": "c",
                                    "Connections": "not the same name"]
        let kept = headers.removingFields(named: ["Upgrade", "Connection", "Sec-WebSocket-Key", long.lowercased()])
        #expect(kept.map(\.name) == ["Host", "X-One", "x-one", "Cookie", "Connections"])
        #expect(kept.map(\.value) == ["a", "1", "2", "c", "not the same name"])
        #expect(headers.removingFields(named: []).map(\.name) == headers.map(\.name))
        #expect(HTTPHeaders().removingFields(named: ["Host"]).count == 0)
    }
}
