/// Splits a byte stream into newline-delimited lines (NDJSON, JSON Lines, log streams carried
/// over WebSocket messages).
///
/// Contract:
/// - A line ends at LF (`\n`); a CR immediately before that LF is part of the terminator
///   (`\r\n`), even when the CR and the LF arrive in different ``append(_:)-([UInt8])`` calls.
///   A lone CR not followed by LF stays part of the line.
/// - Lines may span any number of appended chunks, and a chunk may hold any number of lines.
/// - Empty lines: with ``EmptyLinePolicy/skip`` (the default) lines that are empty after
///   removing the terminator are never returned — blank lines carry no record in NDJSON, and
///   skipping them tolerates keep-alive newlines. With ``EmptyLinePolicy/preserve`` they are
///   returned as `[]`.
/// - ``maxLineLength`` bounds a line's bytes without its terminator. It is enforced during
///   ``append(_:)-([UInt8])``, as soon as the unterminated line grows past it (a CR at the end
///   of the buffered data is not counted, since it may be half of a `\r\n`). After the error,
///   lines completed before the offending one can still be read with ``nextLine()``; the
///   offending line and the rest of that chunk are dropped, and every later `append` throws
///   the same error until ``finish()`` resets the buffer. It never grows without bound.
///
/// Cost: each appended byte is scanned for LF once (the buffered prefix is never rescanned);
/// consumed bytes are compacted only once they are at least half of the storage, so total
/// work is linear in the input.
public struct LineBuffer: Sendable {
    /// What to do with lines that are empty once the terminator is removed.
    public enum EmptyLinePolicy: Sendable {
        /// Never return empty lines.
        case skip
        /// Return empty lines as `[]`.
        case preserve
    }

    /// Maximum bytes of a line, terminator excluded.
    public let maxLineLength: Int
    /// The empty-line policy.
    public let emptyLines: EmptyLinePolicy

    private var storage: [UInt8] = []
    /// Start of the first byte not yet returned by `nextLine()`.
    private var readIndex = 0
    /// Offsets in `storage` of the LFs that end complete, not yet returned lines; `lineEnds[lineEndsHead...]` are live.
    private var lineEnds: [Int] = []
    private var lineEndsHead = 0
    /// Start of the current unterminated line (everything from here on has been scanned).
    private var partialStart = 0
    private var failure: LineBufferError?

    /// Creates an empty buffer.
    ///
    /// - Parameter maxLineLength: default 1 MiB — large enough for any sensible JSON record
    ///   (chat messages, events, model outputs are KiB-sized), small enough that a peer that
    ///   never sends a newline costs at most 1 MiB per connection before it is cut off.
    ///   Negative values are treated as 0.
    /// - Parameter emptyLines: whether lines that are empty once the terminator is removed are
    ///   skipped (default) or returned as `[]`.
    public init(maxLineLength: Int = 1 << 20, emptyLines: EmptyLinePolicy = .skip) {
        self.maxLineLength = max(0, maxLineLength)
        self.emptyLines = emptyLines
    }

    /// Appends bytes and finds the lines they complete.
    ///
    /// - Throws: ``LineBufferError/lineTooLong(limit:)`` when a line exceeds ``maxLineLength``.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) throws(LineBufferError) {
        try appendAndScan(bytes)
    }

    /// Appends bytes; see ``append(_:)-(UnsafeRawBufferPointer)``.
    public mutating func append(_ bytes: [UInt8]) throws(LineBufferError) {
        try appendAndScan(bytes)
    }

    private mutating func appendAndScan<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws(LineBufferError) {
        if let failure { throw failure }
        guard !bytes.isEmpty else { return }
        compactIfWorthwhile()
        let scanStart = storage.count
        storage.append(contentsOf: bytes)
        try scan(from: scanStart)
    }

    /// Records the LFs in `storage[scanStart...]` and checks line lengths.
    private mutating func scan(from scanStart: Int) throws(LineBufferError) {
        var position = scanStart
        while let newline = storage.withUnsafeBytes({ Self.firstLF(in: $0, from: position) }) {
            var length = newline - partialStart
            if length > 0, storage[newline - 1] == UInt8(ascii: "\r") { length -= 1 }
            guard length <= maxLineLength else { try fail(truncatingAt: partialStart) }
            lineEnds.append(newline)
            partialStart = newline + 1
            position = newline + 1
        }
        var partialLength = storage.count - partialStart
        if partialLength > 0, storage[storage.count - 1] == UInt8(ascii: "\r") { partialLength -= 1 }
        guard partialLength <= maxLineLength else { try fail(truncatingAt: partialStart) }
    }

    /// Index of the first `\n` in `bytes[from...]`, eight bytes per step (SWAR zero-byte test).
    @usableFromInline
    static func firstLF(in bytes: UnsafeRawBufferPointer, from: Int) -> Int? {
        let count = bytes.count
        var i = from
        let lf: UInt64 = 0x0a0a_0a0a_0a0a_0a0a
        let low: UInt64 = 0x0101_0101_0101_0101
        let high: UInt64 = 0x8080_8080_8080_8080
        while count &- i >= 8 {
            let x = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)) ^ lf
            // Nonzero iff some byte of x is zero, i.e. some input byte is LF; the lowest set
            // bit marks the first one (bits above it may be false positives, never below).
            let found = (x &- low) & ~x & high
            if found != 0 { return i &+ found.trailingZeroBitCount / 8 }
            i &+= 8
        }
        while i < count {
            if bytes[i] == UInt8(ascii: "\n") { return i }
            i &+= 1
        }
        return nil
    }

    private mutating func fail(truncatingAt index: Int) throws(LineBufferError) -> Never {
        storage.removeSubrange(index...)
        partialStart = storage.count
        let error = LineBufferError.lineTooLong(limit: maxLineLength)
        failure = error
        throw error
    }

    /// The next complete line without its terminator, or `nil` when no complete line is
    /// buffered. Applies the ``EmptyLinePolicy``.
    public mutating func nextLine() -> [UInt8]? {
        nextLine { Array($0) }
    }

    /// The next complete line without its terminator, made into a value by `make` straight
    /// from the buffer's storage (one copy, into whatever `make` builds), or `nil` when no
    /// complete line is buffered. The bytes are valid only during the call. Applies the
    /// ``EmptyLinePolicy`` like ``nextLine()``.
    public mutating func nextLine<Line>(_ make: (UnsafeRawBufferPointer) -> Line) -> Line? {
        guard let range = nextLineRange() else { return nil }
        return storage.withUnsafeBytes { make(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    private mutating func nextLineRange() -> Range<Int>? {
        while lineEndsHead < lineEnds.count {
            let end = lineEnds[lineEndsHead]
            lineEndsHead += 1
            let start = readIndex
            readIndex = end + 1
            var contentEnd = end
            if contentEnd > start, storage[contentEnd - 1] == UInt8(ascii: "\r") { contentEnd -= 1 }
            if contentEnd == start, emptyLines == .skip { continue }
            return start..<contentEnd
        }
        return nil
    }

    /// Ends the stream: returns the unterminated remainder as a final line, and resets the
    /// buffer (including a failed state) for reuse.
    ///
    /// Contract: call it after ``nextLine()`` returned `nil`; complete lines still queued are
    /// discarded. The remainder is returned as-is (a trailing lone CR included, since no LF
    /// follows it). It is `nil` when empty, under both policies: a stream ending in a newline
    /// has no extra empty line after it.
    public mutating func finish() -> [UInt8]? {
        let remainder = partialStart < storage.count ? Array(storage[partialStart...]) : nil
        storage = []
        readIndex = 0
        lineEnds = []
        lineEndsHead = 0
        partialStart = 0
        failure = nil
        return remainder
    }

    /// Bytes appended but not yet returned: queued complete lines with their terminators plus
    /// the unterminated remainder.
    public var bufferedByteCount: Int { storage.count - readIndex }

    /// Drops bytes already returned once they are at least half of the storage (amortized
    /// O(1) per byte), and the consumed part of `lineEnds` likewise.
    private mutating func compactIfWorthwhile() {
        if readIndex > 0, readIndex >= storage.count - readIndex {
            storage.removeSubrange(..<readIndex)
            let shift = readIndex
            lineEnds = lineEnds[lineEndsHead...].map { $0 - shift }
            lineEndsHead = 0
            partialStart -= shift
            readIndex = 0
        } else if lineEndsHead > 0, lineEndsHead >= lineEnds.count - lineEndsHead {
            lineEnds.removeSubrange(..<lineEndsHead)
            lineEndsHead = 0
        }
    }
}
