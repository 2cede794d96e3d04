#if ServiceLifecycleSupport
import ServiceLifecycle

/// A ``WebSocketServer`` runs in a swift-service-lifecycle `ServiceGroup` (trait
/// `ServiceLifecycleSupport`): ``WebSocketServer/run()`` serves until the group shuts down
/// gracefully (SIGTERM, SIGINT if configured, or another service ending), then closes every
/// connection with 1001, waits for them and for route handlers (at most
/// ``WebSocketServerConfiguration/shutdownTimeout``) and returns.
///
/// ```swift
/// let server = WebSocketServer(configuration: .init(port: 8080))
/// let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm],
///                                               logger: logger))
/// try await group.run()
/// ```
extension WebSocketServer: Service {}
#endif
