import Foundation

/// The line-oriented client API: connect to an endpoint, read lines, send typed commands.
public protocol SocketClient: Actor {
    /// Connects and returns one element per received line (see ``SocketAdapter``).
    func connect(to endpoint: some SocketEndpoint) async throws(SwitchboardError) -> AsyncStream<Data>
    /// Sends a command as one text message ending in a newline.
    func send(command: some SocketCommand) async throws(SwitchboardError)
    /// Closes the connection (close code 1000). Idempotent.
    func disconnect() async
}
