import Foundation
import SwitchboardCore

extension WebSocketMessage {
    /// Payload size in bytes.
    public var payloadCount: Int {
        switch self {
        case .text(let b), .binary(let b): return b.count
        }
    }

    /// The text of a text message (nil for binary).
    public var text: String? {
        if case .text(let b) = self { return String(decoding: b, as: UTF8.self) }
        return nil
    }

    /// The payload as `Data`.
    public var data: Data {
        switch self {
        case .text(let b), .binary(let b): return Data(b)
        }
    }
}
