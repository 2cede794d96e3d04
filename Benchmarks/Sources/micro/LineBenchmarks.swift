import SwitchboardCore

/// `LineBuffer` over an NDJSON-like stream: 1 MiB of 64-byte lines appended in 64 KiB chunks,
/// every complete line taken with `nextLine()` after each chunk.
enum LineBenchmarks {
    static func all() -> [Benchmark] {
        [
            split("LF", terminator: [UInt8(ascii: "\n")]),
            split("CRLF", terminator: [UInt8(ascii: "\r"), UInt8(ascii: "\n")]),
        ]
    }

    static func split(_ label: String, terminator: [UInt8]) -> Benchmark {
        let (bytes, lineCount) = Fixtures.lines(totalBytes: Fixtures.mebi, lineLength: 64, terminator: terminator)
        let stream = UnsafeRawBufferPointer(Fixtures.rawCopy(bytes))
        let chunk = 64 * Fixtures.kibi
        let expectedLength = 64 - terminator.count
        return Benchmark(
            name: "LineBuffer: 1 MiB of 64 B \(label) lines, 64 KiB chunks",
            metric: .bytes, bytesPerIteration: stream.count, opsPerIteration: lineCount, opUnit: "line"
        ) { iterations in
            var lines = LineBuffer()
            for _ in 0..<iterations {
                var count = 0
                var start = 0
                while start < stream.count {
                    let end = min(start + chunk, stream.count)
                    do {
                        try lines.append(UnsafeRawBufferPointer(rebasing: stream[start..<end]))
                    } catch {
                        fatalError("append: \(error)")
                    }
                    while let line = lines.nextLine() {
                        precondition(line.count == expectedLength)
                        count += 1
                    }
                    start = end
                }
                precondition(count == lineCount)
            }
        }
    }
}
