// swift-tools-version:6.1
// Benchmarks for Switchboard: a separate package, so the library keeps its small dependency
// set. It builds the comparison peers (raw SwiftNIO and Hummingbird echo servers), our own
// epoll load generator, and in-process micro benchmarks of the protocol core; for the client
// benchmark, a Switchboard client and a line-streaming server.
// `run.sh` builds everything in release and prints one comparison table.
import PackageDescription

let package = Package(
    name: "SwitchboardBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Switchboard", path: ".."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    ],
    targets: [
        // The load generator: C over raw epoll, so it is never the bottleneck.
        // Links OpenSSL (libssl-dev) for its TLS mode and zlib (zlib1g-dev) for permessage-deflate.
        .executableTarget(name: "loadgen", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto"), .linkedLibrary("z")]),
        // The client benchmark's streaming server: C over raw epoll, writes newline-delimited
        // text frames as fast as the socket takes them. libcrypto for Sec-WebSocket-Accept's SHA-1.
        .executableTarget(name: "line-streamer", linkerSettings: [.linkedLibrary("crypto")]),
        // The client benchmark: Switchboard's public client API (SocketAdapter, lines, commands).
        .executableTarget(
            name: "client-bench",
            dependencies: [
                .product(name: "Switchboard", package: "Switchboard"), .product(name: "SwitchboardCore", package: "Switchboard"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Heap per topic of the server's topic replay buffers.
        .executableTarget(
            name: "replay-memory",
            dependencies: [.product(name: "Switchboard", package: "Switchboard"), "CMallocCounter"]
        ),
        // Counts malloc calls in-process (glibc symbol interposition) for allocations/op.
        .target(name: "CMallocCounter"),
        // In-process micro benchmarks of SwitchboardCore.
        .executableTarget(
            name: "micro",
            dependencies: [.product(name: "SwitchboardCore", package: "Switchboard"), "CMallocCounter"]
        ),
        // Comparison peer: a raw SwiftNIO NIOWebSocket echo server.
        .executableTarget(
            name: "nio-echo-server",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Comparison peer: Hummingbird 2's async WebSocket echo server.
        .executableTarget(
            name: "hummingbird-echo-server",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
