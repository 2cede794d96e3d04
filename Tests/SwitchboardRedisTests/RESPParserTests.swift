import SwitchboardRedis
import Testing

/// The RESP2 parser byte by byte: every value kind, every split point, every error.
struct RESPParserTests {
    /// A pipelined stream of replies and the values it must give.
    static let stream: [(bytes: String, value: RESPValue)] = [
        ("+OK\r\n", .simpleString("OK")),
        ("-ERR wrong type\r\n", .error("ERR wrong type")),
        (":-42\r\n", .integer(-42)),
        (":9223372036854775807\r\n", .integer(.max)),
        ("$5\r\nhello\r\n", .bulkString(Array("hello".utf8))),
        ("$0\r\n\r\n", .bulkString([])),
        ("$4\r\na\r\nb\r\n", .bulkString(Array("a\r\nb".utf8))),
        ("$-1\r\n", .null),
        ("*-1\r\n", .null),
        ("*0\r\n", .array([])),
        ("*3\r\n*2\r\n:1\r\n*1\r\n$1\r\nx\r\n+s\r\n$-1\r\n",
         .array([.array([.integer(1), .array([.bulkString([120])])]), .simpleString("s"), .null])),
        ("*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$3\r\none\r\n",
         .array([.bulkString(Array("message".utf8)), .bulkString(Array("news".utf8)), .bulkString(Array("one".utf8))])),
    ]

    static var allBytes: [UInt8] { Array(stream.map(\.bytes).joined().utf8) }

    static func parse(_ chunks: [ArraySlice<UInt8>], limits: RESPParseLimits = .default) throws(RESPParseError) -> [RESPValue] {
        var parser = RESPParser(limits: limits)
        var values: [RESPValue] = []
        for chunk in chunks {
            parser.append(Array(chunk))
            while let v = try parser.next() { values.append(v) }
        }
        return values
    }

    @Test func wholeStream() throws {
        #expect(try Self.parse([Self.allBytes[...]]) == Self.stream.map(\.value))
    }

    @Test func everySplitPoint() throws {
        let bytes = Self.allBytes
        for cut in 0...bytes.count {
            let values = try Self.parse([bytes[..<cut], bytes[cut...]])
            #expect(values == Self.stream.map(\.value), "split at \(cut)")
        }
    }

    @Test func oneByteAtATime() throws {
        let bytes = Self.allBytes
        #expect(try Self.parse(bytes.indices.map { bytes[$0...$0] }) == Self.stream.map(\.value))
    }

    @Test func nothingUntilComplete() throws {
        var parser = RESPParser()
        parser.append(Array("*2\r\n$3\r\nab".utf8))
        #expect(try parser.next() == nil)
        parser.append(Array("c\r\n:7".utf8))
        #expect(try parser.next() == nil)
        parser.append(Array("\r\n".utf8))
        #expect(try parser.next() == .array([.bulkString(Array("abc".utf8)), .integer(7)]))
        #expect(parser.bufferedByteCount == 0)
    }

    @Test(arguments: [
        ("!oops\r\n", RESPParseError.unknownType(UInt8(ascii: "!"))),
        ("$-2\r\n", .invalidLength("-2")),
        ("$abc\r\n", .invalidLength("abc")),
        ("$\r\n", .invalidLength("")),
        ("$+3\r\nabc\r\n", .invalidLength("+3")),
        ("*-5\r\n", .invalidLength("-5")),
        ("$3\r\nabcd\r\n", .missingCRLF),
        (":12a\r\n", .invalidInteger("12a")),
        (":9223372036854775808\r\n", .invalidInteger("9223372036854775808")),
        (":\r\n", .invalidInteger("")),
        ("+a\rb\r\n", .missingCRLF),
        ("+bare LF\n", .missingCRLF),
    ])
    func invalidInput(_ input: String, _ expected: RESPParseError) {
        #expect(throws: expected) { try Self.parse([Array(input.utf8)[...]]) }
    }

    @Test func oversizedBulkRefusedFromItsHeaderAlone() {
        var parser = RESPParser(limits: RESPParseLimits(maxBulkLength: 1024))
        parser.append(Array("$1025\r\n".utf8))
        #expect(throws: RESPParseError.bulkTooLong(length: 1025, limit: 1024)) { try parser.next() }
        // Sticky: the same error again, whatever arrives next.
        parser.append(Array("+OK\r\n".utf8))
        #expect(throws: RESPParseError.bulkTooLong(length: 1025, limit: 1024)) { try parser.next() }
    }

    @Test func limitsOnArraysDepthAndLines() {
        var small = RESPParseLimits()
        small.maxAggregateCount = 3
        small.maxDepth = 2
        small.maxLineLength = 8
        #expect(throws: RESPParseError.tooManyElements(count: 4, limit: 3)) { try Self.parse([Array("*4\r\n".utf8)[...]], limits: small) }
        #expect(throws: RESPParseError.tooDeep(limit: 2)) { try Self.parse([Array("*1\r\n*1\r\n*1\r\n:1\r\n".utf8)[...]], limits: small) }
        // An empty array is a level too (found by the fuzzer: it slipped past the depth limit).
        #expect(throws: RESPParseError.tooDeep(limit: 2)) { try Self.parse([Array("*1\r\n*1\r\n*0\r\n".utf8)[...]], limits: small) }
        #expect(throws: RESPParseError.lineTooLong(limit: 8)) { try Self.parse([Array("+123456789\r\n".utf8)[...]], limits: small) }
        // Detected while the line is still incomplete: nothing more is buffered.
        #expect(throws: RESPParseError.lineTooLong(limit: 8)) { try Self.parse([Array("+12345678901234".utf8)[...]], limits: small) }
        // At the limits: fine.
        #expect((try? Self.parse([Array("*2\r\n*1\r\n+12345678\r\n:1\r\n".utf8)[...]], limits: small)) ==
                [.array([.array([.simpleString("12345678")]), .integer(1)])])
    }

    @Test func largeBulkFedInSmallChunksIsLinear() throws {
        let payload = [UInt8](repeating: 0x61, count: 200_000)
        let bytes = Array("$200000\r\n".utf8) + payload + Array("\r\n".utf8)
        var parser = RESPParser()
        var value: RESPValue?
        var i = 0
        while i < bytes.count {
            parser.append(Array(bytes[i..<min(bytes.count, i + 7)]))
            if let v = try parser.next() { value = v }
            i += 7
        }
        #expect(value == .bulkString(payload))
    }

    @Test func conveniences() {
        #expect(RESPValue.bulkString(Array("12".utf8)).int == 12)
        #expect(RESPValue.simpleString("PONG").string == "PONG")
        #expect(RESPValue.integer(3).string == nil)
        #expect(RESPValue.null.isNull && RESPValue.array([]).array == [])
        #expect(RESPValue.bulkString([UInt8](repeating: 0x62, count: 100)).description.contains("(100 bytes)"))
    }
}
