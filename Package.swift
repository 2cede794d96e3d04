// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Switchboard",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SwitchboardCore", targets: ["SwitchboardCore"]),
        .library(name: "Switchboard", targets: ["Switchboard"]),
        .library(name: "SwitchboardChannel", targets: ["SwitchboardChannel"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    ],
    targets: [
        // OpenSSL (libssl-dev), linked as a system library.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]
        ),
        // System SQLite (libsqlite3-dev), for the chat-room example's history.
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        // Tiny C shims: OpenSSL macros Swift cannot import, and epoll/eventfd glue.
        .target(name: "CSwitchboardShims", dependencies: ["COpenSSL"]),
        // The pure RFC 6455 protocol core: no I/O, no clock, no randomness.
        .target(name: "SwitchboardCore"),
        // I/O layer and public API: event loop, sockets, TLS, client, server.
        .target(
            name: "Switchboard",
            dependencies: [
                "SwitchboardCore", "COpenSSL", "CSwitchboardShims",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The typed client of the /v1/ws agent channel (events, commands, withChannel).
        .target(name: "SwitchboardChannel", dependencies: ["Switchboard"]),
        // Examples: products in their own right, each run by a test.
        .executableTarget(
            name: "echo-server",
            dependencies: ["Switchboard", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/EchoServer"
        ),
        .executableTarget(
            name: "echo-client",
            dependencies: ["Switchboard", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/EchoClient"
        ),
        .executableTarget(
            name: "chat-room",
            dependencies: ["Switchboard", "CSQLite", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/ChatRoom"
        ),
        .executableTarget(
            name: "agent-stream",
            dependencies: ["Switchboard", "SwitchboardChannel",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Examples/AgentStream"
        ),
        .testTarget(name: "SwitchboardCoreTests", dependencies: ["SwitchboardCore"]),
        .testTarget(name: "AgentStreamTests", dependencies: ["Switchboard", "SwitchboardChannel"], exclude: ["Resources"]),
        .testTarget(name: "ChatRoomTests", dependencies: ["Switchboard"], exclude: ["Peers"]),
        .testTarget(name: "SwitchboardTests", dependencies: ["Switchboard"], exclude: ["Peers"]),
    ],
    swiftLanguageModes: [.v6]
)
