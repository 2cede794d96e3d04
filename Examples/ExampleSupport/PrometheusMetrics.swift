import Logging
import Switchboard
import SwitchboardCore
#if MetricsSupport
import Metrics
import Prometheus
#endif

/// The example servers' `GET /metrics`: the server's swift-metrics counters (connections,
/// messages, closes, handshake failures…; see `ServerMetrics` in the library) in the Prometheus
/// text exposition format 0.0.4, from swift-prometheus.
///
/// With the `MetricsSupport` trait (what `scripts/serve` and `scripts/test` build), the first
/// use makes one `PrometheusCollectorRegistry` and its `PrometheusMetricsFactory`, and
/// bootstraps the process's `MetricsSystem` with it (once per process: swift-metrics allows one
/// bootstrap). Without the trait there is nothing to serve: ``isAvailable`` is false,
/// ``response()`` is nil (a `404`), and ``makeServer(configuration:logger:)`` makes a server
/// without metrics.
package enum PrometheusMetrics {
    /// The path the examples serve the metrics on.
    package static let path = "/metrics"

    /// The media type of the Prometheus text format, version 0.0.4.
    package static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// Whether this build serves `/metrics` (the `MetricsSupport` trait).
    package static var isAvailable: Bool {
        #if MetricsSupport
        true
        #else
        false
        #endif
    }

    #if MetricsSupport
    /// The registry and factory, made and bootstrapped on first use (a `static let`: exactly once,
    /// thread-safe).
    private static let backend: (registry: PrometheusCollectorRegistry, factory: PrometheusMetricsFactory) = {
        let registry = PrometheusCollectorRegistry()
        let factory = PrometheusMetricsFactory(registry: registry)
        MetricsSystem.bootstrap(factory)
        return (registry, factory)
    }()

    /// The factory the example's server reports to (bootstrapped as the global one too).
    package static var factory: PrometheusMetricsFactory { backend.factory }
    #endif

    /// A server reporting to the Prometheus registry (with the `MetricsSupport` trait), or a plain
    /// one (without).
    package static func makeServer(configuration: WebSocketServerConfiguration, logger: Logger) -> WebSocketServer {
        #if MetricsSupport
        WebSocketServer(configuration: configuration, logger: logger, metricsFactory: factory)
        #else
        WebSocketServer(configuration: configuration, logger: logger)
        #endif
    }

    /// The `200` answer to `GET /metrics` (every metric in the Prometheus text format), or nil
    /// (`404`) in a build without the `MetricsSupport` trait.
    package static func response() -> HTTPResponse? {
        #if MetricsSupport
        HTTPResponse(status: 200,
                     headers: ["Content-Type": contentType, "Cache-Control": "no-store"],
                     body: backend.registry.emitToBuffer())
        #else
        nil
        #endif
    }
}
