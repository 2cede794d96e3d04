import Foundation
import SwitchboardCore

/// Turns a connection's messages into lines (``WebSocketConnection/lines()``): the adapter keeps
/// the bytes of a line still in progress, lines may span any number of messages.
///
/// Allocated on first use, so connections that never read lines pay nothing for it.
final class LineReader: @unchecked Sendable {
    // Safety: touched only from `WebSocketConnection.nextLine()`, isolated to its connection.
    private var buffer: LineBuffer
    private var ended = false

    init(configuration: WebSocketConfiguration) {
        buffer = LineBuffer(maxLineLength: configuration.maxLineLength, emptyLines: configuration.emptyLines)
    }

    /// The next line, or nil at the end (a final unterminated line is delivered first). A line
    /// longer than ``WebSocketConfiguration/maxLineLength`` fails the connection with 1009.
    func next(from connection: isolated WebSocketConnection) async -> Data? {
        while !ended {
            if let line = buffer.nextLine() { return Data(line) }
            guard let message = try? await connection.receive() else {
                ended = true
                return buffer.finish().map { Data($0) }
            }
            do {
                switch message {
                case .text(let bytes), .binary(let bytes): try buffer.append(bytes)
                }
            } catch {
                ended = true
                buffer = LineBuffer(maxLineLength: 0, emptyLines: .skip)
                connection.failLineTooLong()
                return nil
            }
        }
        return nil
    }
}
