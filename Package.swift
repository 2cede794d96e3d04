// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Switchboard",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SwitchboardCore", targets: ["SwitchboardCore"]),
        .library(name: "Switchboard", targets: ["Switchboard"]),
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
        .testTarget(name: "SwitchboardCoreTests", dependencies: ["SwitchboardCore"]),
        .testTarget(name: "SwitchboardTests", dependencies: ["Switchboard"]),
    ],
    swiftLanguageModes: [.v6]
)
