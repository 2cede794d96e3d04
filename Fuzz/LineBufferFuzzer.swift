// libFuzzer target: the newline line buffer. Chunking must not change the lines, and no line
// may exceed the limit.

func lineFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let data = UnsafeRawBufferPointer(start: bytes, count: size)
    let maxLine = 64
    for policy in [LineBuffer.EmptyLinePolicy.skip, .preserve] {
        var reference: [[UInt8]]?
        forEachChunking(data) { chunks in
            var buffer = LineBuffer(maxLineLength: maxLine, emptyLines: policy)
            var lines: [[UInt8]] = []
            var failed = false
            for chunk in chunks where !failed {
                do {
                    try buffer.append(chunk)
                } catch {
                    failed = true
                }
                while let line = buffer.nextLine() {
                    if line.count > maxLine { fatalError("line over the limit") }
                    lines.append(line)
                }
            }
            if failed { lines.append([0xFF]) } else if let rest = buffer.finish() { lines.append(rest) }
            if let reference {
                // A too-long line may be detected at different points; compare only when clean.
                if !failed && reference.last != [0xFF] && reference != lines { fatalError("chunking changed the lines") }
            } else {
                reference = lines
            }
        }
    }
    return 0
}
