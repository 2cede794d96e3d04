import Logging
import Switchboard
#if ServiceLifecycleSupport
import ServiceLifecycle
#endif

/// Runs `server` until SIGTERM or SIGINT, then shuts it down gracefully.
///
/// Built with the `ServiceLifecycleSupport` trait (as `scripts/serve` and `scripts/test` build
/// it), the server runs in a swift-service-lifecycle `ServiceGroup`, the way it runs beside
/// other services in a real deployment. Without the trait, the same happens with
/// ``ShutdownSignal`` and task cancellation.
package func runUntilSignal(_ server: WebSocketServer, logger: Logger) async throws {
    #if ServiceLifecycleSupport
    let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm, .sigint],
                                                  logger: logger))
    try await group.run()
    #else
    let serving = Task { try await server.run() }
    await withTaskCancellationHandler {
        await ShutdownSignal.wait()
    } onCancel: {
        serving.cancel()
    }
    serving.cancel()
    try await serving.value
    #endif
}
