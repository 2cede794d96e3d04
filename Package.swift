// swift-tools-version:6.1
import PackageDescription

// Optional integrations are package traits, off by default, so that a service that needs only
// the WebSocket library builds swift-log and nothing else:
// - `ServiceLifecycleSupport`: `WebSocketServer` conforms to swift-service-lifecycle's `Service`
//   (graceful shutdown from a `ServiceGroup`).
// - `MetricsSupport`: the server reports to swift-metrics (a factory per server, defaulting to
//   the global one).
// - `JWTSupport`: `JWTAuthenticator`, signed-token (JWT) verification for `route(_:authenticate:)`
//   with vapor/jwt-kit (which brings swift-crypto and BoringSSL's crypto: a longer clean build).
// Enable them from a dependent package with
// `.package(url: "…/switchboard.git", from: "…", traits: ["ServiceLifecycleSupport", "MetricsSupport"])`,
// or here with `swift build --enable-all-traits` (what `scripts/test` and `scripts/serve` do).
let package = Package(
    name: "Switchboard",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SwitchboardCore", targets: ["SwitchboardCore"]),
        .library(name: "Switchboard", targets: ["Switchboard"]),
        .library(name: "SwitchboardChannel", targets: ["SwitchboardChannel"]),
        // A Redis client (RESP2, pipelining, pub/sub) on Switchboard's event loops, and the
        // Redis backplane that spreads a server's topics over several processes.
        .library(name: "SwitchboardRedis", targets: ["SwitchboardRedis"]),
    ],
    traits: [
        .trait(name: "ServiceLifecycleSupport",
               description: "WebSocketServer conforms to ServiceLifecycle.Service (swift-service-lifecycle)."),
        .trait(name: "MetricsSupport",
               description: "WebSocketServer reports connections, messages, closes and handshakes to swift-metrics."),
        .trait(name: "JWTSupport",
               description: "JWTAuthenticator: JWT bearer tokens verified with vapor/jwt-kit (HS*, RS*, PS256, ES*, EdDSA; secret, PEM or JWKS keys)."),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        // JWT verification (the JWTSupport trait): the JOSE implementation, so that the project
        // writes no signature code.
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        // jwt-kit's own crypto dependency, named here so that the test support signs HS256
        // tokens synchronously (TestTokens); nothing of it is linked without JWTSupport.
        .package(url: "https://github.com/apple/swift-crypto.git", "4.1.0"..<"6.0.0"),
        // `swift package generate-documentation` (a plugin: nothing of it is linked).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
        // The examples' `GET /metrics` (Prometheus text format): an example-only dependency,
        // linked into ExampleSupport with the MetricsSupport trait, never into the libraries.
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // OpenSSL (libssl-dev), linked as a system library.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]
        ),
        // zlib (zlib1g-dev), for permessage-deflate (RFC 7692).
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]),
        // System SQLite (libsqlite3-dev), for the chat-room example's history.
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        // Tiny C shims: OpenSSL macros Swift cannot import, and epoll/eventfd glue.
        .target(name: "CSwitchboardShims", dependencies: ["COpenSSL"]),
        // The pure RFC 6455 protocol core: no I/O, no clock, no randomness. Public, sans-I/O.
        .target(name: "SwitchboardCore", dependencies: ["CZlib"]),
        // I/O layer and public API: event loop, sockets, TLS, client, server.
        .target(
            name: "Switchboard",
            dependencies: [
                "SwitchboardCore", "COpenSSL", "CSwitchboardShims",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle",
                         condition: .when(traits: ["ServiceLifecycleSupport"])),
                .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["MetricsSupport"])),
                .product(name: "JWTKit", package: "jwt-kit", condition: .when(traits: ["JWTSupport"])),
            ]
        ),
        // The typed client of the /v1/ws agent channel (events, commands, withChannel).
        .target(name: "SwitchboardChannel",
                dependencies: ["Switchboard", "SwitchboardCore", .product(name: "Logging", package: "swift-log")]),
        // Redis: the RESP2 codec (pure, under RESP/, fuzzed), the client, and the topic backplane.
        .target(name: "SwitchboardRedis",
                dependencies: ["Switchboard", "SwitchboardCore", .product(name: "Logging", package: "swift-log")]),
        // Examples: products in their own right, each run by a test.
        .executableTarget(
            name: "echo-server",
            dependencies: ["Switchboard", "SwitchboardCore", "SwitchboardRedis",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/EchoServer"
        ),
        .executableTarget(
            name: "echo-client",
            dependencies: ["Switchboard", "SwitchboardCore", "ExampleSupport",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/EchoClient"
        ),
        // What the examples share: running a server until SIGTERM/SIGINT (in a ServiceGroup
        // with the ServiceLifecycleSupport trait), and the clients' network flags.
        .target(name: "ExampleSupport",
                dependencies: ["Switchboard", "SwitchboardCore",
                               .product(name: "ArgumentParser", package: "swift-argument-parser"),
                               .product(name: "ServiceLifecycle", package: "swift-service-lifecycle",
                                        condition: .when(traits: ["ServiceLifecycleSupport"])),
                               .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["MetricsSupport"])),
                               .product(name: "Prometheus", package: "swift-prometheus",
                                        condition: .when(traits: ["MetricsSupport"]))],
                path: "Examples/ExampleSupport"),
        // Starting child processes without Foundation's Process (see ChildProcess): the
        // agent-stream agents, the chat room's token command, and every peer the tests start.
        .target(name: "CSpawnShims", path: "Examples/CSpawnShims"),
        .target(name: "SpawnSupport", dependencies: ["CSpawnShims"], path: "Examples/SpawnSupport"),
        // The chat room's wire format, commands and rate limiter: a library so the tests use
        // the same code as the binary.
        .target(name: "ChatRoomCore", dependencies: ["Switchboard", "SwitchboardCore"], path: "Examples/ChatRoomCore"),
        .executableTarget(
            name: "chat-room",
            dependencies: ["Switchboard", "SwitchboardCore", "ChatRoomCore", "ExampleSupport", "CSQLite", "SwitchboardRedis",
                           "SpawnSupport",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/ChatRoom"
        ),
        .executableTarget(
            name: "agent-stream",
            dependencies: ["Switchboard", "SwitchboardCore", "SwitchboardChannel", "ExampleSupport", "SpawnSupport",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/AgentStream"
        ),
        // Helpers shared by the test targets (locks, temporary directories, peers' processes).
        // With JWTSupport, TestTokens signs HS256 tokens (swift-crypto's HMAC) and asks PyJWT for the others.
        .target(name: "SwitchboardTestSupport",
                dependencies: ["Switchboard", "SwitchboardCore", "SpawnSupport",
                               .product(name: "Crypto", package: "swift-crypto", condition: .when(traits: ["JWTSupport"]))],
                path: "Tests/SwitchboardTestSupport"),
        .testTarget(name: "SwitchboardCoreTests", dependencies: ["SwitchboardCore"]),
        .testTarget(name: "SwitchboardRedisTests",
                    dependencies: ["SwitchboardRedis", "Switchboard", "SwitchboardCore", "SwitchboardTestSupport", "SpawnSupport"]),
        .testTarget(name: "SwitchboardChannelTests",
                    dependencies: ["SwitchboardChannel", "Switchboard", "SwitchboardCore", "SwitchboardTestSupport"]),
        .testTarget(name: "AgentStreamTests",
                    dependencies: ["Switchboard", "SwitchboardCore", "SwitchboardChannel", "SwitchboardTestSupport", "SpawnSupport"],
                    exclude: ["Resources"]),
        // ExampleSupport: APIAccessTests check the API's key and token-scope rules in-process.
        .testTarget(name: "ChatRoomTests",
                    dependencies: ["Switchboard", "SwitchboardCore", "ChatRoomCore", "ExampleSupport", "SwitchboardTestSupport",
                                   "SwitchboardRedis", "SpawnSupport"],
                    exclude: ["Peers"]),
        .testTarget(
            name: "SwitchboardTests",
            dependencies: ["Switchboard", "SwitchboardCore", "SwitchboardTestSupport", "SpawnSupport",
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle",
                                    condition: .when(traits: ["ServiceLifecycleSupport"])),
                           .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["MetricsSupport"])),
                           .product(name: "MetricsTestKit", package: "swift-metrics", condition: .when(traits: ["MetricsSupport"]))],
            exclude: ["Peers"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
