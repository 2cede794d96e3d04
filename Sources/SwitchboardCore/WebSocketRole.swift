/// Which end of a connection this endpoint is; it decides the masking rules (RFC 6455 §5.1).
public enum WebSocketRole: Sendable, Hashable {
    /// Masks every frame it sends; rejects masked frames it receives.
    case client
    /// Never masks; requires every received frame to be masked.
    case server
}
