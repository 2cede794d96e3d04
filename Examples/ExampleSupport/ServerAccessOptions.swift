import ArgumentParser
import Switchboard
import SwitchboardCore

/// The example servers' browser and peer limits: which web pages may connect (same origin by
/// default, so that a site the user visits cannot drive a server on the user's machine), and
/// how many sockets one address may hold (256 by default, so that one client cannot take every
/// place of `maxConnections`).
package struct ServerAccessOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Also accept WebSocket upgrades from pages of this origin, scheme://host[:port] (repeatable).",
        discussion: "By default only the server's own pages (same origin) and programs (no Origin header) connect."))
    package var allowOrigin: [String] = []
    @Option(help: ArgumentHelp(
        "Sockets one IP address may hold at once (0: no cap).",
        discussion: "Beyond it: 429 too_many_connections. Use 0 behind a reverse proxy, where every client shares its address."))
    package var maxConnectionsPerAddress = 256

    package init() {}

    package func validate() throws {
        for origin in allowOrigin where !OriginPolicy.isValid(origin: origin) {
            throw ValidationError("--allow-origin \(origin): expected scheme://host[:port], such as https://app.example.com")
        }
        if maxConnectionsPerAddress < 0 { throw ValidationError("--max-connections-per-address must be 0 or more") }
    }

    /// Sets the origin policy of `configuration` (same origin, and the origins allowed) and its
    /// cap per address.
    package func apply(to configuration: inout WebSocketServerConfiguration) {
        configuration.originPolicy = .sameOrigin(also: allowOrigin)
        configuration.maxConnectionsPerAddress = maxConnectionsPerAddress > 0 ? maxConnectionsPerAddress : nil
    }
}
