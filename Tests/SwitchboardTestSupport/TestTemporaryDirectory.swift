import Foundation

/// Temporary folders for tests, all removed when the test process exits.
///
/// Removal at exit instead of per test: Swift Testing runs tests in parallel and some folders
/// outlive the test that made them (the shared test PKI, a database reopened by a restarted
/// server), so no test ever removes a folder another one still uses. A crashed process leaves
/// its folders behind.
package enum TestTemporaryDirectory {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var created: [String] = []  // guarded by `lock`
    private static let cleanupRegistered: Bool = {
        atexit { TestTemporaryDirectory.removeAll() }
        return true
    }()

    /// A new empty folder `<temporary directory>/<prefix>-<UUID>`.
    package static func make(prefix: String) throws -> URL {
        _ = cleanupRegistered
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        lock.lock()
        created.append(dir.path)
        lock.unlock()
        return dir
    }

    /// Removes every folder made so far (called at exit).
    package static func removeAll() {
        lock.lock()
        let paths = created
        created = []
        lock.unlock()
        for path in paths { try? FileManager.default.removeItem(atPath: path) }
    }
}
