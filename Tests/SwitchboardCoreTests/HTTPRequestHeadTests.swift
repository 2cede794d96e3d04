import Testing
@testable import SwitchboardCore

@Suite("RFC 3986 §3.4 request target path and query")
struct HTTPRequestHeadTests {
    private func head(_ target: String) -> HTTPRequestHead { HTTPRequestHead(method: "GET", target: target) }

    @Test func pathAndQueryAreSplitAtFirstQuestionMark() {
        #expect(head("/chat").path == "/chat")
        #expect(head("/chat").query == nil)
        #expect(head("/chat?").query == "")
        #expect(head("/a%2Fb?x=1?y").path == "/a%2Fb")
        #expect(head("/a%2Fb?x=1?y").query == "x=1?y")
    }

    @Test func queryItemsArePercentDecodedButPlusIsNotSpace() {
        let items = head("/?name=J%C3%BCrgen+M&empty=&flag&&a%3Db=c%26d").queryItems
        #expect(items.map(\.name) == ["name", "empty", "flag", "a=b"])
        #expect(items.map(\.value) == ["Jürgen+M", "", "", "c&d"])
    }

    @Test func invalidEscapesAreKeptLiterally() {
        let items = head("/?a=%zz&b=%4&c=%&d=100%25&e=%41%4a%4A").queryItems
        #expect(items.map(\.value) == ["%zz", "%4", "%", "100%", "AJJ"])
    }

    @Test func invalidUTF8AfterDecodingDoesNotTrap() {
        #expect(head("/?x=%FF%FE").queryItems.first?.value == "\u{FFFD}\u{FFFD}")
    }

    @Test func noQueryMeansNoItems() {
        #expect(head("/x").queryItems.isEmpty)
    }
}
