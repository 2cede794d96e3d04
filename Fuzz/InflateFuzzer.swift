// libFuzzer target: permessage-deflate's receive path (RFC 7692). The input's first byte picks
// the role and the mode; the rest is both a raw deflate body and a stream of frames. Nothing
// may trap, output may never exceed the limit, every chunking of the frames must give the same
// actions, and compressing then inflating must give the input back.

func inflateFuzz(_ bytes: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size > 0 else { return 0 }
    let all = UnsafeRawBufferPointer(start: bytes, count: size)
    let selector = all[0]
    let data = UnsafeRawBufferPointer(rebasing: all[1...])
    let limit = 1 << 16

    // 1. The bounded decompressor on arbitrary bytes, twice without reset (context carried).
    if let d = DeflateDecompressor(windowBits: 9 + Int(selector % 7)) {
        for _ in 0..<2 {
            do {
                let out = try d.decompress(data, limit: limit, maxRatio: 64, ratioThreshold: 4096)
                if out.count > limit { fatalError("decompressor exceeded its limit") }
            } catch {
                // tooLarge, ratioExceeded or corrupt: all fine, as long as nothing trapped.
            }
        }
    }

    // 2. Round trip at the selected window.
    if let c = DeflateCompressor(level: Int(selector % 10), windowBits: 9 + Int(selector % 7), memoryLevel: 1 + Int(selector % 9)),
       let d = DeflateDecompressor(windowBits: 15) {
        guard let body = c.compress(data, reset: selector & 0x40 != 0) else { fatalError("compress failed") }
        let back = try? body.withUnsafeBytes { try d.decompress($0, limit: data.count) }
        if back.map({ $0.elementsEqual(data) }) != true { fatalError("round trip changed the data") }
    }

    // 3. Frames through the protocol with a codec: identical results for every chunking.
    let role: WebSocketRole = selector & 1 == 0 ? .server : .client
    let parameters = PerMessageDeflateParameters(serverNoContextTakeover: selector & 2 != 0,
                                                 clientNoContextTakeover: selector & 4 != 0)
    var configuration: PerMessageDeflateConfiguration = selector & 8 != 0 ? .contextTakeover : .default
    configuration.maxDecompressionRatio = selector & 16 != 0 ? nil : 32
    let limits = WebSocketProtocolLimits(maxFrameSize: 1 << 14, maxMessageSize: limit)
    var reference: [WebSocketProtocolAction]?
    forEachChunking(data) { chunks in
        let codec = PerMessageDeflateCodec(parameters: parameters, configuration: configuration, role: role,
                                           shared: PerMessageDeflateSharedStreams())
        var machine = WebSocketProtocol(role: role, limits: limits, deflate: codec)
        var rng = FuzzRNG()
        let actions = feedChunks(chunks, to: &machine, using: &rng)
        for case .message(let m) in actions {
            switch m {
            case .text(let b), .binary(let b): if b.count > limit { fatalError("message over the limit") }
            }
        }
        expectSameAsFirstChunking(actions, &reference)
    }
    return 0
}
