import ArgumentParser
import Switchboard
import SwitchboardCore

/// The example servers' browser and peer limits: which web pages may connect (same origin by
/// default, so that a site the user visits cannot drive a server on the user's machine).
package struct ServerAccessOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Also accept WebSocket upgrades from pages of this origin, scheme://host[:port] (repeatable).",
        discussion: "By default only the server's own pages (same origin) and programs (no Origin header) connect."))
    package var allowOrigin: [String] = []

    package init() {}

    package func validate() throws {
        for origin in allowOrigin where !OriginPolicy.isValid(origin: origin) {
            throw ValidationError("--allow-origin \(origin): expected scheme://host[:port], such as https://app.example.com")
        }
    }

    /// Sets the origin policy of `configuration`: same origin, and the origins allowed.
    package func apply(to configuration: inout WebSocketServerConfiguration) {
        configuration.originPolicy = .sameOrigin(also: allowOrigin)
    }
}
