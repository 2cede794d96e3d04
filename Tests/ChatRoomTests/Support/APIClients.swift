import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The backend-API peers: Python's urllib (Peers/http_request.py), prometheus_client's parser
/// (Peers/metrics_scrape.py), redis-py (Peers/redis_room_publish.py); and URLSession for the
/// long paging loops.
enum APIClients {
    /// A key for `--api-key-file` (32 hex characters) written to a new file; returns (file, key).
    static func keyFile(in dir: URL, key: String = "k3y-" + UUID().uuidString.replacingOccurrences(of: "-", with: "")) throws -> (path: String, key: String) {
        let file = dir.appendingPathComponent("api.key")
        try Data((key + "\n").utf8).write(to: file)
        return (file.path, key)
    }

    /// One answer of Peers/http_request.py.
    struct Answer: Decodable, Sendable {
        var status: Int
        var body: String
        var error: String?

        /// The body as a JSON object (empty when it is not one).
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:] }
        /// `error.code` of a JSON error body.
        var errorCode: String? { (json["error"] as? [String: Any])?["code"] as? String }
        /// `error.type` of a JSON error body.
        var errorType: String? { (json["error"] as? [String: Any])?["type"] as? String }
    }

    /// Runs Peers/http_request.py (urllib) once.
    static func python(_ method: String, _ url: String, key: String? = nil, body: String? = nil,
                       bodySize: Int? = nil) async throws -> Answer {
        var arguments = ["python3", "-u", ChatPaths.peers.appendingPathComponent("http_request.py").path, method, url]
        if let key { arguments += ["--key", key] }
        if let body { arguments += ["--body", body] }
        if let bodySize { arguments += ["--body-size", String(bodySize)] }
        let p = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"), arguments: arguments)
        let line = try await p.waitForLine("urllib's answer") { $0.hasPrefix("{") }
        await p.waitForExit()
        return try JSONDecoder().decode(Answer.self, from: Data(line.utf8))
    }

    /// Scrapes `url` with Peers/metrics_scrape.py: the status and every sample
    /// (`name{label=value,…}` → value) parsed by prometheus_client.
    static func scrape(_ url: String, key: String? = nil) async throws -> (status: Int, samples: [String: Double]) {
        try await Python.require(module: "prometheus_client", hint: "pip install prometheus-client")
        let p = try ChildProcess(executable: URL(fileURLWithPath: "/usr/bin/env"),
                                 arguments: ["python3", "-u", ChatPaths.peers.appendingPathComponent("metrics_scrape.py").path, url]
                                     + (key.map { [$0] } ?? []))
        let status = await p.waitForExit()
        guard status == 0 else { throw TestFailure("metrics_scrape.py failed (\(status)): \(p.stderrText)") }
        let line = try await p.waitForLine("the parsed metrics") { $0.hasPrefix("{") }
        struct Scrape: Decodable { var status: Int; var samples: [String: Double] }
        let scrape = try JSONDecoder().decode(Scrape.self, from: Data(line.utf8))
        return (scrape.status, scrape.samples)
    }

    /// A GET with URLSession: status and body as a JSON object.
    static func get(_ url: String, key: String?) async throws -> (status: Int, json: [String: Any]) {
        guard let u = URL(string: url) else { throw TestFailure("bad URL \(url)") }
        var request = URLRequest(url: u)
        if let key { request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        let json = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, json)
    }

    /// Every message of `room` paged back with `GET …?before=…&limit=limit` from the newest:
    /// the ids in the order received (each page oldest→newest, pages newest first), and the
    /// number of pages. Fails on a page without `next` before the end, or a non-200.
    static func pageBack(_ baseURL: String, room: String, key: String, limit: Int) async throws -> (ids: [Int64], texts: [String], pages: Int) {
        var before: Int64?
        var ids: [Int64] = []
        var texts: [String] = []
        var pages = 0
        while true {
            var url = "\(baseURL)v1/rooms/\(room)/messages?limit=\(limit)"
            if let before { url += "&before=\(before)" }
            let (status, json) = try await get(url, key: key)
            guard status == 200, let messages = json["messages"] as? [[String: Any]] else {
                throw TestFailure("GET \(url): \(status) \(json)")
            }
            pages += 1
            // Pages are oldest→newest: prepend to keep the whole list oldest first.
            ids = messages.compactMap { ($0["id"] as? NSNumber)?.int64Value } + ids
            texts = messages.compactMap { $0["text"] as? String } + texts
            guard let next = json["next"] as? NSNumber else {
                guard json["next"] is NSNull else { throw TestFailure("next missing in \(json)") }
                return (ids, texts, pages)
            }
            before = next.int64Value
            if pages > 10_000 { throw TestFailure("paging does not end") }
        }
    }
}
