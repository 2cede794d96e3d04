// libFuzzer target: the bounded HTTP head parsers, the handshake checks on top of them, and the
// plain-HTTP body framing and reader (HTTPBodyFraming, HTTPBodyReader) after the head.

func httpFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let data = UnsafeRawBufferPointer(start: bytes, count: size)
    let limits = HTTPParseLimits(maxHeaderBytes: 4096, maxHeaderCount: 32)
    var reference: String?
    forEachChunking(data) { chunks in
        var request = HTTPRequestParser(limits: limits)
        var response = HTTPResponseParser(limits: limits)
        var requestDone = false, responseDone = false
        var summary = "", responseSummary = ""
        var body: HTTPBodyReader?
        for chunk in chunks {
            if var reader = body {
                reader.append(chunk)
                body = reader
            }
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
                        do {
                            switch try HTTPBodyFraming.decide(head, limit: 1024) {
                            case .none: summary += "nobody"
                            case .length(let length):
                                if length < 0 || length > 1024 { fatalError("framing beyond the limit: \(length)") }
                                var reader = HTTPBodyReader(length: length)
                                reader.append(chunk[consumed...])
                                body = reader
                            }
                        } catch {
                            summary += "bodyerr(\(String(describing: error)))"
                        }
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
        if let body {
            if body.body.count > body.length { fatalError("kept more than the body") }
            summary += "body(\(body.length) \(body.isComplete) \(body.body.reduce(0) { ($0 &* 31) &+ Int($1) }))"
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
