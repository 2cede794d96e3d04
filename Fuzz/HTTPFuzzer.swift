// libFuzzer target: the bounded HTTP head parsers and the handshake checks on top of them.

func httpFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let data = UnsafeRawBufferPointer(start: bytes, count: size)
    let limits = HTTPParseLimits(maxHeaderBytes: 4096, maxHeaderCount: 32)
    var reference: String?
    forEachChunking(data) { chunks in
        var request = HTTPRequestParser(limits: limits)
        var response = HTTPResponseParser(limits: limits)
        var requestDone = false, responseDone = false
        var summary = "", responseSummary = ""
        for chunk in chunks {
            if !requestDone {
                do {
                    switch try request.parse(chunk) {
                    case .needMoreData: break
                    case .complete(let head, let consumed):
                        requestDone = true
                        summary += "req(\(head.method) \(head.target) \(head.headers.count))"
                        if consumed > chunk.count { fatalError("consumed more than given") }
                        if let kind = try? WebSocketServerHandshake.classify(head), case .upgrade(let up) = kind {
                            _ = try? WebSocketServerHandshake.acceptResponse(for: up, subprotocol: up.subprotocols.first)
                        }
                        _ = head.queryItems
                    }
                } catch {
                    requestDone = true
                    summary += "reqerr(\(error))"
                }
            }
            if !responseDone {
                do {
                    switch try response.parse(chunk) {
                    case .needMoreData: break
                    case .complete(let head, _):
                        responseDone = true
                        responseSummary += "resp(\(head.status))"
                        if let hs = try? WebSocketClientHandshake(host: "h", path: "/", key: Array(repeating: 1, count: 16)) {
                            _ = try? hs.validate(head)
                        }
                    }
                } catch {
                    responseDone = true
                    responseSummary += "resperr"
                }
            }
        }
        summary += "|" + responseSummary
        if let reference {
            if reference != summary { fatalError("chunking changed the result: \(reference) vs \(summary)") }
        } else {
            reference = summary
        }
    }
    return 0
}
