import Testing
@testable import SwitchboardCore

private func b(_ string: String) -> [UInt8] { Array(string.utf8) }

private func drain(_ buffer: inout LineBuffer) -> [String] {
    var lines: [String] = []
    while let line = buffer.nextLine() { lines.append(String(decoding: line, as: UTF8.self)) }
    return lines
}

@Suite("Newline-delimited line buffering")
struct LineBufferTests {
    @Test func splitsOnLFAndCRLF() throws {
        var buffer = LineBuffer()
        try buffer.append(b("a\nbb\r\nccc\n"))
        #expect(drain(&buffer) == ["a", "bb", "ccc"])
        #expect(buffer.bufferedByteCount == 0)
        #expect(buffer.finish() == nil)
    }

    @Test func lineSpanningManyChunks() throws {
        var buffer = LineBuffer()
        for piece in ["{\"a\"", ":", "1", "}"] {
            try buffer.append(b(piece))
            #expect(buffer.nextLine() == nil)
        }
        #expect(buffer.bufferedByteCount == 7)
        try buffer.append(b("\r\n{"))
        #expect(drain(&buffer) == ["{\"a\":1}"])
        #expect(buffer.bufferedByteCount == 1)
    }

    @Test func crlfSplitBetweenAppendsIsStripped() throws {
        var buffer = LineBuffer()
        try buffer.append(b("abc\r"))
        #expect(buffer.nextLine() == nil)
        try buffer.append(b("\ndef\r"))
        try buffer.append(b("\n"))
        #expect(drain(&buffer) == ["abc", "def"])
    }

    @Test func loneCRStaysInTheLine() throws {
        var buffer = LineBuffer()
        try buffer.append(b("a\rb\n\r\r\nc\r"))
        #expect(drain(&buffer) == ["a\rb", "\r"])
        #expect(buffer.finish() == b("c\r"))
    }

    @Test func emptyLinesAreSkippedByDefault() throws {
        var buffer = LineBuffer()
        try buffer.append(b("\n\r\na\n\n\r\nb\n\n"))
        #expect(drain(&buffer) == ["a", "b"])
    }

    @Test func emptyLinesArePreservedOnRequest() throws {
        var buffer = LineBuffer(emptyLines: .preserve)
        try buffer.append(b("\n\r\na\n\n\r"))
        try buffer.append(b("\nb\n"))
        #expect(drain(&buffer) == ["", "", "a", "", "", "b"])
        #expect(buffer.finish() == nil) // a trailing newline does not start an extra empty line
    }

    @Test func finishReturnsTheUnterminatedRemainderAndResets() throws {
        var buffer = LineBuffer()
        try buffer.append(b("x\ntail"))
        #expect(drain(&buffer) == ["x"])
        #expect(buffer.finish() == b("tail"))
        #expect(buffer.bufferedByteCount == 0)
        #expect(buffer.finish() == nil)
        try buffer.append(b("again\n"))
        #expect(drain(&buffer) == ["again"])
    }

    @Test func tooLongLineThrowsWhenTheNewlineArrives() throws {
        var buffer = LineBuffer(maxLineLength: 4)
        #expect(throws: LineBufferError.lineTooLong(limit: 4)) { try buffer.append(b("1234\r\n12345\nlater\n")) }
        // Lines completed before the offending one are still delivered; the rest is dropped.
        #expect(drain(&buffer) == ["1234"])
        #expect(buffer.bufferedByteCount == 0)
        // The buffer stays failed until finish().
        #expect(throws: LineBufferError.lineTooLong(limit: 4)) { try buffer.append(b("ok\n")) }
        #expect(throws: LineBufferError.lineTooLong(limit: 4)) { try [UInt8]("ok\n".utf8).withUnsafeBytes { raw in try buffer.append(raw) } }
        #expect(buffer.finish() == nil)
        try buffer.append(b("ok\n"))
        #expect(drain(&buffer) == ["ok"])
    }

    @Test func tooLongLineThrowsBeforeAnyNewlineArrives() throws {
        var buffer = LineBuffer(maxLineLength: 8)
        try buffer.append(b("12345"))
        try buffer.append(b("678"))       // exactly at the limit
        try buffer.append(b("\r"))        // may still be half of CRLF: not counted
        #expect(buffer.bufferedByteCount == 9)
        try buffer.append(b("\n"))
        #expect(drain(&buffer) == ["12345678"])
        try buffer.append(b("12345678"))
        #expect(throws: LineBufferError.lineTooLong(limit: 8)) { try buffer.append(b("9")) }
        #expect(buffer.bufferedByteCount == 0)
        // A CR that turns out to be part of the line counts once more data follows it.
        var other = LineBuffer(maxLineLength: 3)
        try other.append(b("ab\r"))
        try other.append(b("\r"))
        #expect(throws: LineBufferError.lineTooLong(limit: 3)) { try other.append(b("x")) }
    }

    @Test func lineTooLongErrorDescribesTheLimit() {
        let error = LineBufferError.lineTooLong(limit: 10)
        #expect(error.limit == 10)
        #expect(error.description == "line exceeds the limit of 10 bytes")
        #expect(error != .lineTooLong(limit: 11))
    }

    @Test func defaultsAndClamping() {
        #expect(LineBuffer().maxLineLength == 1 << 20)
        #expect(LineBuffer().emptyLines == .skip)
        #expect(LineBuffer(maxLineLength: -3).maxLineLength == 0)
    }

    @Test func zeroLimitStillAllowsEmptyLines() throws {
        var buffer = LineBuffer(maxLineLength: 0, emptyLines: .preserve)
        try buffer.append(b("\r\n\n"))
        #expect(drain(&buffer) == ["", ""])
        #expect(throws: LineBufferError.lineTooLong(limit: 0)) { try buffer.append(b("a")) }
    }

    @Test func everySplitPointGivesTheSameLines() throws {
        let input = b("alpha\r\n\nbeta\rx\n\r\ngamma\r\ndelta")
        for policy in [LineBuffer.EmptyLinePolicy.skip, .preserve] {
            var whole = LineBuffer(emptyLines: policy)
            try whole.append(input)
            let expectedLines = drain(&whole)
            let expectedTail = whole.finish()
            #expect(expectedLines == (policy == .skip ? ["alpha", "beta\rx", "gamma"] : ["alpha", "", "beta\rx", "", "gamma"]))
            #expect(expectedTail == b("delta"))
            for first in 0...input.count {
                for second in first...input.count where second == first || second == input.count || (second - first) % 3 == 0 {
                    var buffer = LineBuffer(emptyLines: policy)
                    var lines: [String] = []
                    for range in [0..<first, first..<second, second..<input.count] {
                        try buffer.append(Array(input[range]))
                        lines += drain(&buffer)
                    }
                    #expect(lines == expectedLines, "split \(first)/\(second)")
                    #expect(buffer.finish() == expectedTail, "split \(first)/\(second)")
                }
            }
        }
    }

    @Test func byteAtATimeThroughTheRawBufferEntryPoint() throws {
        var buffer = LineBuffer()
        var lines: [String] = []
        for byte in b("one\r\ntwo\nthree\r\n") {
            try [byte].withUnsafeBytes { raw in try buffer.append(raw) }
            lines += drain(&buffer)
        }
        #expect(lines == ["one", "two", "three"])
        try [UInt8]().withUnsafeBytes { raw in try buffer.append(raw) }
        try buffer.append([])
        #expect(buffer.bufferedByteCount == 0)
    }

    @Test func tenThousandLinesKeepTheirOrder() throws {
        var buffer = LineBuffer()
        var input: [UInt8] = []
        for i in 0..<10_000 { input += b("{\"n\":\(i)}" + (i % 2 == 0 ? "\n" : "\r\n")) }
        var received: [String] = []
        var offset = 0, chunk = 1
        while offset < input.count {
            let end = min(input.count, offset + chunk)
            try buffer.append(Array(input[offset..<end]))
            // Read only some lines each time so compaction runs with lines still queued.
            if chunk % 3 != 0 { received += drain(&buffer) } else if let line = buffer.nextLine() { received.append(String(decoding: line, as: UTF8.self)) }
            offset = end
            chunk = chunk % 97 + 7
        }
        received += drain(&buffer)
        #expect(received.count == 10_000)
        #expect(received == (0..<10_000).map { "{\"n\":\($0)}" })
        #expect(buffer.bufferedByteCount == 0)
    }

    @Test func storageIsCompactedAsLinesAreConsumed() throws {
        var buffer = LineBuffer()
        let line = b(String(repeating: "x", count: 100) + "\n")
        for _ in 0..<1_000 {
            try buffer.append(line)
            #expect(buffer.nextLine()?.count == 100)
        }
        try buffer.append(b("partial"))
        #expect(buffer.bufferedByteCount == 7)
    }

    /// The word-at-a-time newline search agrees with a byte loop for every LF position, start
    /// offset and tail length, including bytes that differ from LF by one bit and 0x8a/0x0b
    /// (the classic false positives of the SWAR zero-byte test).
    @Test func wordAtATimeNewlineSearchMatchesByteSearch() {
        let fillers: [UInt8] = [0x0b, 0x8a, 0x0e, 0x09, 0xff, 0x00, 0x2a]
        for length in 0...40 {
            for lfAt in -1..<length {
                for filler in fillers {
                    var bytes = [UInt8](repeating: filler, count: length)
                    if lfAt >= 0 { bytes[lfAt] = 0x0a }
                    if lfAt >= 0, lfAt + 3 < length { bytes[lfAt + 3] = 0x0a }  // a later LF too
                    for from in 0...length {
                        let expected = bytes[from...].firstIndex(of: 0x0a)
                        let found = bytes.withUnsafeBytes { LineBuffer.firstLF(in: $0, from: from) }
                        #expect(found == expected, "length \(length) lf \(lfAt) filler \(filler) from \(from)")
                    }
                }
            }
        }
    }
}
