import Testing
@testable import SwitchboardCore

private let hello = Array("Hello".utf8)
private let roles: [WebSocketRole] = [.client, .server]

private func closeStatus(_ code: WebSocketCloseCode, _ reason: String = "") -> WebSocketCloseStatus {
    WebSocketCloseStatus(code: code, reason: reason)
}

@Suite("RFC 6455 §5.7 examples parsed in both directions at every split point")
struct WebSocketProtocolExampleTests {
    @Test func clientParsesUnmaskedHello() {
        #expect(actionsAtEverySplit(.client, hex("81 05 48 65 6c 6c 6f")) == [.message(.text(hello))])
    }

    @Test func serverParsesMaskedHello() {
        #expect(actionsAtEverySplit(.server, hex("81 85 37 fa 21 3d 7f 9f 4d 51 58")) == [.message(.text(hello))])
    }

    @Test func clientParsesFragmentedHello() {
        #expect(actionsAtEverySplit(.client, hex("01 03 48 65 6c 80 02 6c 6f")) == [.message(.text(hello))])
    }

    @Test func serverParsesMaskedFragmentedHello() {
        let bytes = peerFrame(to: .server, .text, fin: false, Array("Hel".utf8)) + peerFrame(to: .server, .continuation, Array("lo".utf8))
        #expect(actionsAtEverySplit(.server, bytes) == [.message(.text(hello))])
    }

    @Test func clientAnswersUnmaskedPingWithMaskedPong() {
        // The pong is the §5.7 masked pong: TestRNG yields the example key.
        #expect(actionsAtEverySplit(.client, hex("89 05 48 65 6c 6c 6f")) == [.sendPong(hex("8a 85 37 fa 21 3d 7f 9f 4d 51 58"))])
    }

    @Test func serverParsesMaskedPong() {
        #expect(actionsAtEverySplit(.server, hex("8a 85 37 fa 21 3d 7f 9f 4d 51 58")) == [.pong(hello)])
    }

    @Test func serverAnswersMaskedPingWithUnmaskedPong() {
        let ping = peerFrame(to: .server, .ping, hello)
        #expect(actionsAtEverySplit(.server, ping) == [.sendPong(hex("8a 05 48 65 6c 6c 6f"))])
    }

    @Test func bothRolesParse256ByteBinary() {
        let payload = (0..<256).map { UInt8(truncatingIfNeeded: $0) }
        let unmasked = hex("82 7E 01 00") + payload
        #expect(actionsAtEverySplit(.client, unmasked) == [.message(.binary(payload))])
        #expect(actionsAtEverySplit(.server, peerFrame(to: .server, .binary, payload)) == [.message(.binary(payload))])
    }

    @Test func bothRolesParse64KiBBinary() {
        let payload = (0..<65536).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let unmasked = hex("82 7F 00 00 00 00 00 01 00 00") + payload
        #expect(actionsAtEverySplit(.client, unmasked, splitStride: 1021) == [.message(.binary(payload))])
        #expect(actionsAtEverySplit(.server, peerFrame(to: .server, .binary, payload), splitStride: 1021) == [.message(.binary(payload))])
    }

    @Test func severalFramesInOneReadYieldActionsInOrder() {
        let bytes = hex("81 05 48 65 6c 6c 6f") + hex("89 00") + hex("82 01 2A") + hex("8A 01 07")
        #expect(actionsAtEverySplit(.client, bytes) == [
            .message(.text(hello)), .sendPong(ownFrame(.client, .pong, [])), .message(.binary([42])), .pong([7]),
        ])
    }

    @Test func partialFrameConsumesAllInputAndWaits() {
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG()
        #expect(collectActions(&machine, chunks: [hex("81 05 48 65")], rng: &rng) == [])
        #expect(collectActions(&machine, chunks: [hex("6c 6c 6f")], rng: &rng) == [.message(.text(hello))])
    }

    @Test func offsetOutsideTheInputIsClamped() {
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG()
        let bytes = hex("81 05 48 65 6c 6c 6f")
        bytes.withUnsafeBytes { raw in
            var offset = -5
            #expect(machine.nextAction(in: raw, offset: &offset, using: &rng) == .message(.text(hello)))
            #expect(offset == 7)
            offset = 99
            #expect(machine.nextAction(in: raw, offset: &offset, using: &rng) == nil)
            #expect(offset == 7)
        }
    }
}

@Suite("RFC 6455 §5.2 base framing")
struct WebSocketProtocolFramingTests {
    @Test func acceptsEachLengthEncodingAtItsBoundaries() {
        for length in [0, 1, 125, 126, 127, 65535, 65536] {
            let payload = [UInt8](repeating: 0x5A, count: length)
            for role in roles {
                #expect(actions(role, chunks: [peerFrame(to: role, .binary, payload)]) == [.message(.binary(payload))], "length \(length)")
            }
        }
    }

    @Test func acceptsNonMinimal16And64BitLengths() {
        let sixteen = hex("82 7E 00 03 01 02 03")
        let sixtyFour = hex("82 7F 00 00 00 00 00 00 00 03 01 02 03")
        #expect(actionsAtEverySplit(.client, sixteen) == [.message(.binary([1, 2, 3]))])
        #expect(actionsAtEverySplit(.client, sixtyFour) == [.message(.binary([1, 2, 3]))])
    }

    @Test func rejects64BitLengthWithMostSignificantBitSet() {
        let bytes = hex("82 7F 80 00 00 00 00 00 00 05")
        #expect(actionsAtEverySplit(.client, bytes) == failure(.client, .lengthMSBSet))
    }

    @Test func rejectsEachRsvBitWithoutNegotiatedExtension() {
        for rsvBits: UInt8 in [0x40, 0x20, 0x10, 0x70] {
            for role in roles {
                var frame = peerFrame(to: role, .text, hello)
                frame[0] |= rsvBits
                #expect(actionsAtEverySplit(role, frame) == failure(role, .rsvBitsSet), "rsv \(rsvBits)")
            }
        }
    }

    @Test func rejectsEveryReservedOpcode() {
        for raw: UInt8 in [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            let opcode = WebSocketOpcode(rawValue: raw)!
            for role in roles {
                let frame = peerFrame(to: role, opcode, [])
                #expect(actionsAtEverySplit(role, frame) == failure(role, .reservedOpcode(opcode)), "opcode \(raw)")
            }
        }
    }

    @Test func bytesAfterAFailureAreIgnored() {
        let bytes = hex("83 00") + hex("81 05 48 65 6c 6c 6f")
        let result = actionsAtEverySplit(.client, bytes)
        #expect(result == failure(.client, .reservedOpcode(WebSocketOpcode(rawValue: 3)!)))
    }
}

@Suite("RFC 6455 §5.1 and §5.3 masking rules")
struct WebSocketProtocolMaskingTests {
    @Test func serverRejectsUnmaskedClientFrame() {
        #expect(actionsAtEverySplit(.server, hex("81 05 48 65 6c 6c 6f")) == failure(.server, .unmaskedClientFrame))
    }

    @Test func clientRejectsMaskedServerFrame() {
        #expect(actionsAtEverySplit(.client, hex("81 85 37 fa 21 3d 7f 9f 4d 51 58")) == failure(.client, .maskedServerFrame))
    }

    @Test func clientFailureCloseFrameIsMaskedAndServerFailureCloseFrameIsNot() throws {
        let clientClose = try closeReply(.client, after: hex("81 85 37 fa 21 3d 7f 9f 4d 51 58"))
        let serverClose = try closeReply(.server, after: hex("81 05 48 65 6c 6c 6f"))
        #expect(clientClose == failureCloseFrame(.client, .maskedServerFrame))
        #expect(serverClose == failureCloseFrame(.server, .unmaskedClientFrame))
        #expect(clientClose[1] & 0x80 != 0)
        #expect(serverClose[1] & 0x80 == 0)
    }

    @Test func serverUnmasksEachFrameWithItsOwnKey() {
        let a = WebSocketFrameSerializer.frame(opcode: .text, fin: false, payload: Array("Hel".utf8), maskingKey: WebSocketMaskingKey(1, 2, 3, 4))
        let b = WebSocketFrameSerializer.frame(opcode: .continuation, payload: Array("lo".utf8), maskingKey: WebSocketMaskingKey(9, 8, 7, 6))
        #expect(actionsAtEverySplit(.server, a + b) == [.message(.text(hello))])
    }

    @Test func clientMasksEveryFrameItWritesWithAFreshKey() throws {
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG([0x0403_0201, 0x0807_0605])
        var buffer: [UInt8] = []
        try machine.writeMessage(.binary, payload: hello, into: &buffer, using: &rng)
        try machine.writePing(payload: hello, into: &buffer, using: &rng)
        let expected = WebSocketFrameSerializer.frame(opcode: .binary, payload: hello, maskingKey: WebSocketMaskingKey(1, 2, 3, 4))
            + WebSocketFrameSerializer.frame(opcode: .ping, payload: hello, maskingKey: WebSocketMaskingKey(5, 6, 7, 8))
        #expect(buffer == expected)
    }
}

@Suite("RFC 6455 §5.4 fragmentation")
struct WebSocketProtocolFragmentationTests {
    @Test func reassemblesManyFragmentsIncludingEmptyOnes() {
        for role in roles {
            let bytes = peerFrame(to: role, .binary, fin: false, [1]) + peerFrame(to: role, .continuation, fin: false, [])
                + peerFrame(to: role, .continuation, fin: false, [2, 3]) + peerFrame(to: role, .continuation, [])
            #expect(actionsAtEverySplit(role, bytes) == [.message(.binary([1, 2, 3]))])
        }
    }

    @Test func controlFramesMayBeInterleavedInAFragmentedMessage() {
        for role in roles {
            let bytes = peerFrame(to: role, .text, fin: false, Array("Hel".utf8)) + peerFrame(to: role, .ping, [9])
                + peerFrame(to: role, .pong, [8]) + peerFrame(to: role, .continuation, Array("lo".utf8))
            #expect(actionsAtEverySplit(role, bytes) == [.sendPong(ownFrame(role, .pong, [9])), .pong([8]), .message(.text(hello))])
        }
    }

    @Test func rejectsContinuationWithoutMessageInProgress() {
        for role in roles {
            #expect(actionsAtEverySplit(role, peerFrame(to: role, .continuation, hello)) == failure(role, .unexpectedContinuation))
            let afterComplete = peerFrame(to: role, .text, hello) + peerFrame(to: role, .continuation, hello)
            #expect(actionsAtEverySplit(role, afterComplete) == [.message(.text(hello))] + failure(role, .unexpectedContinuation))
        }
    }

    @Test func rejectsNewDataFrameWhileFragmentedMessageInProgress() {
        for role in roles {
            for opcode in [WebSocketOpcode.text, .binary] {
                let bytes = peerFrame(to: role, .binary, fin: false, [1]) + peerFrame(to: role, opcode, [2])
                #expect(actionsAtEverySplit(role, bytes) == failure(role, .expectedContinuation))
            }
        }
    }

    @Test func consecutiveMessagesDoNotLeakIntoEachOther() {
        let bytes = peerFrame(to: .client, .text, fin: false, [0x61]) + peerFrame(to: .client, .continuation, [0x62])
            + peerFrame(to: .client, .binary, [0xFF]) + peerFrame(to: .client, .text, [])
        #expect(actionsAtEverySplit(.client, bytes) == [.message(.text([0x61, 0x62])), .message(.binary([0xFF])), .message(.text([]))])
    }
}

@Suite("RFC 6455 §5.5 control frames")
struct WebSocketProtocolControlFrameTests {
    @Test func pingIsAnsweredWithPongOfSamePayloadThenReported() {
        for role in roles {
            let payload = [UInt8](repeating: 0x70, count: 125)
            #expect(actionsAtEverySplit(role, peerFrame(to: role, .ping, payload)) == [.sendPong(ownFrame(role, .pong, payload))])
        }
    }

    @Test func unsolicitedPongIsReportedOnly() {
        for role in roles {
            #expect(actionsAtEverySplit(role, peerFrame(to: role, .pong, hello)) == [.pong(hello)])
        }
    }

    @Test func rejectsControlFramePayloadOver125Bytes() {
        for role in roles {
            for opcode in [WebSocketOpcode.ping, .pong, .close] {
                let frame = peerFrame(to: role, opcode, [UInt8](repeating: 0x30, count: 126))
                #expect(actionsAtEverySplit(role, frame) == failure(role, .controlFrameTooLong), "\(opcode)")
            }
        }
    }

    @Test func rejectsFragmentedControlFrame() {
        for role in roles {
            for opcode in [WebSocketOpcode.ping, .pong, .close] {
                let frame = peerFrame(to: role, opcode, fin: false, [])
                #expect(actionsAtEverySplit(role, frame) == failure(role, .fragmentedControlFrame), "\(opcode)")
            }
        }
    }
}

@Suite("RFC 6455 §5.5.1 and §7 closing handshake")
struct WebSocketProtocolClosingTests {
    @Test func peerCloseIsReportedThenTheReplyEchoesItsCodeAndCompletes() throws {
        for role in roles {
            let close = peerFrame(to: role, .close, WebSocketFrameSerializer.closePayload(code: .goingAway, reason: "bye ü"))
            let status = closeStatus(.goingAway, "bye ü")
            #expect(actionsAtEverySplit(role, close) == [.peerClosed(status)])
            #expect(try closeReply(role, after: close) == ownFrame(role, .close, hex("03 E9")))
        }
    }

    /// The close-time state is shared between copies of a machine until one of them changes it
    /// (copy on write): completing the handshake on one copy leaves the other in
    /// `.closeReceived`, still owing its reply.
    @Test func aCopiedMachineKeepsItsOwnCloseState() throws {
        for role in roles {
            var machine = WebSocketProtocol(role: role)
            var rng = TestRNG()
            let close = peerFrame(to: role, .close, WebSocketFrameSerializer.closePayload(code: .goingAway, reason: "bye"))
            _ = collectActions(&machine, chunks: [close], rng: &rng)
            var copy = machine
            var out: [UInt8] = []
            guard case .complete(let status) = try machine.writeClose(code: .normalClosure, reason: "", into: &out, using: &rng) else {
                Issue.record("expected the handshake to complete")
                continue
            }
            #expect(status == closeStatus(.goingAway, "bye"))
            #expect(machine.state == .closed && machine.closeStatus == status)
            #expect(copy.state == .closeReceived && copy.closeStatus == status)
            var copyOut: [UInt8] = []
            guard case .complete = try copy.writeClose(code: .normalClosure, reason: "", into: &copyOut, using: &rng) else {
                Issue.record("expected the copy's handshake to complete")
                continue
            }
            #expect(copyOut == ownFrame(role, .close, hex("03 E9")))
            #expect(out == copyOut)
        }
    }

    @Test func emptyPeerCloseReportsNoStatusAndIsAnsweredWithEmptyClose() throws {
        for role in roles {
            let status = closeStatus(.noStatusReceived)
            #expect(actionsAtEverySplit(role, peerFrame(to: role, .close, [])) == [.peerClosed(status)])
            #expect(try closeReply(role, after: peerFrame(to: role, .close, [])) == ownFrame(role, .close, []))
        }
    }

    /// Autobahn 4.1.5's race, byte by byte: the peer sends a message then breaks the protocol.
    /// The machine fails the connection but lets the application's echo of the earlier message
    /// go out before our 1002 close (RFC 6455 §7.1.7 fails the connection; nothing we owe is
    /// lost).
    @Test func failingIsAClose_anEchoOwedGoesOutBeforeOur1002() throws {
        for role in roles {
            var machine = WebSocketProtocol(role: role)
            var rng = TestRNG()
            let bytes = peerFrame(to: role, .text, hello) + hex("8F 00")   // reserved opcode 0xF
            let error = WebSocketProtocolError.reservedOpcode(WebSocketOpcode(rawValue: 0xF)!)
            let status = WebSocketCloseStatus(code: .protocolError, reason: error.description, error: error)
            #expect(collectActions(&machine, chunks: [bytes], rng: &rng) == [.message(.text(hello)), .failed(status)])
            #expect(machine.state == .closeReceived)
            #expect(machine.closeStatus == status)
            // The application echoes the message it already had, then closes.
            var out: [UInt8] = []
            try machine.writeMessage(.text, payload: hello, into: &out, using: &rng)
            #expect(try machine.writeClose(code: .normalClosure, reason: "", into: &out, using: &rng) == .complete(status))
            #expect(out == ownFrame(role, .text, hello) + failureCloseFrame(role, error))
            #expect(machine.state == .closed)
            #expect(throws: WebSocketStateError.notOpen) { try machine.writeMessage(.text, payload: hello, into: &out, using: &rng) }
        }
    }

    @Test func afterThePeersCloseDataMayStillBeSentAndInputIsIgnored() throws {
        for role in roles {
            var machine = WebSocketProtocol(role: role)
            var rng = TestRNG()
            let status = closeStatus(.normalClosure)
            let close = peerFrame(to: role, .close, hex("03 E8"))
            #expect(collectActions(&machine, chunks: [close + peerFrame(to: role, .ping, [1])], rng: &rng) == [.peerClosed(status)])
            #expect(collectActions(&machine, chunks: [peerFrame(to: role, .text, hello), hex("FF FF")], rng: &rng) == [])
            var out: [UInt8] = []
            try machine.writeMessage(.binary, payload: [7], into: &out, using: &rng)
            try machine.writePing(payload: [2], into: &out, using: &rng)
            #expect(out == ownFrame(role, .binary, [7]) + ownFrame(role, .ping, [2]))
            // Whatever code the application asks for, the reply echoes the peer's.
            out = []
            #expect(try machine.writeClose(code: .goingAway, reason: "x", into: &out, using: &rng) == .complete(status))
            #expect(out == ownFrame(role, .close, hex("03 E8")))
            #expect(try machine.writeClose(code: .goingAway, reason: "", into: &out, using: &rng) == .alreadySent)
        }
    }

    @Test func transportEndingBeforeTheReplyReportsThePeersClose() {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        let status = closeStatus(.goingAway)
        _ = collectActions(&machine, chunks: [peerFrame(to: .server, .close, hex("03 E9"))], rng: &rng)
        #expect(machine.transportClosed() == status)
        #expect(machine.state == .closed)
    }

    @Test func rejectsOneByteClosePayload() {
        for role in roles {
            #expect(actionsAtEverySplit(role, peerFrame(to: role, .close, [0x03])) == failure(role, .invalidClosePayload))
        }
    }

    @Test func rejectsCloseCodesThatMustNotBeOnTheWire() {
        for code: UInt16 in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
            let payload = [UInt8(code >> 8), UInt8(code & 0xFF)]
            #expect(actionsAtEverySplit(.server, peerFrame(to: .server, .close, payload)) == failure(.server, .invalidCloseCode(code)), "code \(code)")
        }
    }

    @Test func acceptsApplicationCloseCodes() throws {
        for code: UInt16 in [1000, 1003, 1007, 1014, 3000, 4999] {
            let payload = [UInt8(code >> 8), UInt8(code & 0xFF)]
            let status = closeStatus(WebSocketCloseCode(rawValue: code))
            #expect(actionsAtEverySplit(.client, peerFrame(to: .client, .close, payload)) == [.peerClosed(status)])
            #expect(try closeReply(.client, after: peerFrame(to: .client, .close, payload)) == ownFrame(.client, .close, payload))
        }
    }

    @Test func rejectsCloseReasonThatIsNotUTF8With1007() {
        for role in roles {
            let payload = hex("03 E8") + hex("ED A0 80")
            #expect(actionsAtEverySplit(role, peerFrame(to: role, .close, payload)) == failure(role, .invalidCloseReasonUTF8))
        }
    }

    @Test func weInitiateThenPeerRepliesAndTransportCloses() throws {
        for role in roles {
            var machine = WebSocketProtocol(role: role)
            var rng = TestRNG()
            var buffer: [UInt8] = []
            #expect(try machine.writeClose(code: .normalClosure, reason: "done", into: &buffer, using: &rng) == .waitingForPeer)
            #expect(buffer == ownFrame(role, .close, hex("03 E8") + Array("done".utf8)))
            #expect(machine.state == .closing)
            let reply = peerFrame(to: role, .close, hex("03 E8"))
            let status = closeStatus(.normalClosure)
            #expect(collectActions(&machine, chunks: [reply], rng: &rng) == [.peerClosed(status), .closeTransport(status)])
            #expect(machine.state == .closed)
            #expect(machine.transportClosed() == status)
        }
    }

    @Test func writeCloseIsIdempotent() throws {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        #expect(try machine.writeClose(code: .goingAway, reason: "", into: &buffer, using: &rng) == .waitingForPeer)
        let written = buffer
        #expect(try machine.writeClose(code: .goingAway, reason: "", into: &buffer, using: &rng) == .alreadySent)
        #expect(buffer == written)
    }

    @Test func writeCloseRefusesCodesThatMustNotBeSent() {
        for code in [WebSocketCloseCode.noStatusReceived, .abnormalClosure, .tlsHandshakeFailure, WebSocketCloseCode(rawValue: 999)] {
            var machine = WebSocketProtocol(role: .server)
            var rng = TestRNG()
            var buffer: [UInt8] = []
            #expect(throws: WebSocketStateError.invalidArgument) {
                try machine.writeClose(code: code, reason: "", into: &buffer, using: &rng)
            }
            #expect(buffer.isEmpty)
            #expect(machine.state == .open)
        }
    }

    @Test func writeCloseTruncatesLongReasonOnScalarBoundary() throws {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        try machine.writeClose(code: .normalClosure, reason: String(repeating: "é", count: 100), into: &buffer, using: &rng)
        #expect(buffer.count == 2 + 2 + 122)
        #expect(buffer[1] == 124)
    }

    @Test func dataArrivingAfterWeSentCloseIsStillDelivered() throws {
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        try machine.writeClose(code: .normalClosure, reason: "", into: &buffer, using: &rng)
        let bytes = peerFrame(to: .client, .text, hello) + peerFrame(to: .client, .pong, [1])
        #expect(collectActions(&machine, chunks: [bytes], rng: &rng) == [.message(.text(hello)), .pong([1])])
    }

    @Test func pingAfterWeSentCloseIsNotAnswered() throws {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        try machine.writeClose(code: .normalClosure, reason: "", into: &buffer, using: &rng)
        #expect(collectActions(&machine, chunks: [peerFrame(to: .server, .ping, [5])], rng: &rng) == [])
    }

    @Test func protocolErrorAfterWeSentCloseOnlyClosesTransport() throws {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        try machine.writeClose(code: .normalClosure, reason: "", into: &buffer, using: &rng)
        let error = WebSocketProtocolError.unmaskedClientFrame
        let status = WebSocketCloseStatus(code: .protocolError, reason: error.description, error: error)
        #expect(collectActions(&machine, chunks: [hex("81 00")], rng: &rng) == [.closeTransport(status)])
    }

    @Test func afterCloseTransportEverythingIsIgnored() throws {
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        try machine.writeClose(code: .normalClosure, reason: "", into: &buffer, using: &rng)
        let close = peerFrame(to: .client, .close, [])
        #expect(collectActions(&machine, chunks: [close], rng: &rng).count == 2)
        #expect(collectActions(&machine, chunks: [hex("81 05 48 65 6c 6c 6f"), hex("FF FF FF")], rng: &rng) == [])
        #expect(machine.state == .closed)
    }

    @Test func closeFrameInSameReadAsDataEndsParsing() {
        let bytes = peerFrame(to: .client, .text, hello) + peerFrame(to: .client, .close, []) + peerFrame(to: .client, .text, hello)
        let status = closeStatus(.noStatusReceived)
        #expect(actionsAtEverySplit(.client, bytes) == [.message(.text(hello)), .peerClosed(status)])
    }

    @Test func sendingIsRefusedOnceCloseWasSent() throws {
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        try machine.writeClose(code: .normalClosure, reason: "", into: &buffer, using: &rng)
        let sent = buffer
        #expect(throws: WebSocketStateError.notOpen) {
            try machine.writeMessage(.text, payload: hello, into: &buffer, using: &rng)
        }
        #expect(throws: WebSocketStateError.notOpen) { try machine.writePing(payload: [], into: &buffer, using: &rng) }
        #expect(throws: WebSocketStateError.notOpen) { try machine.writePong(payload: [], into: &buffer, using: &rng) }
        #expect(buffer == sent)
    }

    @Test func transportClosedWithoutHandshakeReports1006() throws {
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG()
        #expect(collectActions(&machine, chunks: [hex("81 05 48")], rng: &rng) == [])
        #expect(machine.transportClosed() == closeStatus(.abnormalClosure))
        #expect(machine.state == .closed)
        #expect(collectActions(&machine, chunks: [hex("6c 6c 6f")], rng: &rng) == [])
        var buffer: [UInt8] = []
        #expect(throws: WebSocketStateError.notOpen) { try machine.writePing(payload: [], into: &buffer, using: &rng) }
        #expect(try machine.writeClose(code: .normalClosure, reason: "", into: &buffer, using: &rng) == .alreadySent)
    }

    @Test func transportClosedAfterFailureReturnsTheFailureStatus() {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        let result = collectActions(&machine, chunks: [hex("81 00")], rng: &rng)
        #expect(result == failure(.server, .unmaskedClientFrame))
        #expect(machine.transportClosed().error == .unmaskedClientFrame)
    }
}

@Suite("RFC 6455 §5.6 and §8.1 text messages must be UTF-8")
struct WebSocketProtocolUTF8Tests {
    @Test func invalidUTF8FailsFastMidFragmentBeforeTheFrameEnds() {
        for role in roles {
            let payload = Array("valid so far".utf8) + hex("ED A0 80") + [UInt8](repeating: 0x61, count: 100)
            let frame = peerFrame(to: role, .text, fin: false, payload)
            let headerSize = WebSocketFrameSerializer.headerSize(payloadLength: payload.count, masked: role == .server)
            // Only up to the offending byte (A0) arrives: the failure must already be reported.
            let partial = Array(frame[..<(headerSize + 14)])
            #expect(actions(role, chunks: [partial]) == failure(role, .invalidUTF8))
            #expect(actionsAtEverySplit(role, frame) == failure(role, .invalidUTF8))
        }
    }

    @Test func invalidUTF8InALaterFragmentFailsAt1007() {
        let bytes = peerFrame(to: .client, .text, fin: false, hello) + peerFrame(to: .client, .continuation, fin: false, hex("F4 90 80 80"))
        #expect(actionsAtEverySplit(.client, bytes) == failure(.client, .invalidUTF8))
    }

    @Test func sequenceSplitAcrossFragmentsIsValid() {
        let euro = hex("E2 82 AC")
        for role in roles {
            let bytes = peerFrame(to: role, .text, fin: false, [euro[0]]) + peerFrame(to: role, .continuation, fin: false, [euro[1]])
                + peerFrame(to: role, .continuation, [euro[2]])
            #expect(actionsAtEverySplit(role, bytes) == [.message(.text(euro))])
        }
    }

    @Test func truncatedSequenceAtEndOfMessageFailsWith1007() {
        for role in roles {
            let bytes = peerFrame(to: role, .text, fin: false, hello) + peerFrame(to: role, .continuation, hex("E2 82"))
            #expect(actionsAtEverySplit(role, bytes) == failure(role, .invalidUTF8))
        }
    }

    @Test func emptyTextMessageIsValid() {
        for role in roles {
            #expect(actionsAtEverySplit(role, peerFrame(to: role, .text, [])) == [.message(.text([]))])
        }
    }

    @Test func binaryMessagesAreNotValidated() {
        #expect(actionsAtEverySplit(.client, peerFrame(to: .client, .binary, hex("ED A0 80 FF"))) == [.message(.binary(hex("ED A0 80 FF")))])
    }

    @Test func validatorIsResetBetweenMessages() {
        let bytes = peerFrame(to: .client, .text, fin: false, hex("E2")) + peerFrame(to: .client, .ping, [])
        var machine = WebSocketProtocol(role: .client)
        var rng = TestRNG()
        _ = collectActions(&machine, chunks: [bytes, peerFrame(to: .client, .continuation, hex("82 AC")), peerFrame(to: .client, .text, hello)], rng: &rng)
        #expect(machine.state == .open)
    }

    @Test func writeMessageRefusesInvalidUTF8TextAndNonDataOpcodes() {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        #expect(throws: WebSocketStateError.invalidArgument) {
            try machine.writeMessage(.text, payload: hex("C0 AF"), into: &buffer, using: &rng)
        }
        #expect(throws: WebSocketStateError.invalidArgument) {
            try machine.writeMessage(.text, payload: hex("E2 82"), into: &buffer, using: &rng)
        }
        for opcode in [WebSocketOpcode.ping, .close, .continuation] {
            #expect(throws: WebSocketStateError.invalidArgument) {
                try machine.writeMessage(opcode, payload: hello, into: &buffer, using: &rng)
            }
        }
        #expect(buffer.isEmpty)
    }
}

@Suite("RFC 6455 §10.4 size limits")
struct WebSocketProtocolLimitTests {
    static let small = WebSocketProtocolLimits(maxFrameSize: 10, maxMessageSize: 20)

    @Test func frameOverLimitFailsWith1009AsSoonAsHeaderIsRead() {
        for role in roles {
            let frame = peerFrame(to: role, .binary, [UInt8](repeating: 1, count: 11))
            let headerOnly = Array(frame[..<WebSocketFrameSerializer.headerSize(payloadLength: 11, masked: role == .server)])
            #expect(actions(role, limits: Self.small, chunks: [headerOnly]) == failure(role, .frameTooLarge))
            #expect(actionsAtEverySplit(role, limits: Self.small, frame) == failure(role, .frameTooLarge))
        }
    }

    @Test func hugeDeclaredLengthFailsWithoutBuffering() {
        // 2^62 bytes declared: must fail at the header with the default limits.
        #expect(actionsAtEverySplit(.client, hex("82 7F 40 00 00 00 00 00 00 00")) == failure(.client, .frameTooLarge))
    }

    @Test func frameAtLimitIsAccepted() {
        let payload = [UInt8](repeating: 1, count: 10)
        #expect(actionsAtEverySplit(.client, limits: Self.small, peerFrame(to: .client, .binary, payload)) == [.message(.binary(payload))])
    }

    @Test func fragmentedMessageOverLimitFailsWith1009() {
        for role in roles {
            let ten = [UInt8](repeating: 2, count: 10)
            let bytes = peerFrame(to: role, .binary, fin: false, ten) + peerFrame(to: role, .continuation, fin: false, ten)
                + peerFrame(to: role, .continuation, [3])
            #expect(actionsAtEverySplit(role, limits: Self.small, bytes) == failure(role, .messageTooLarge))
        }
    }

    @Test func fragmentedMessageAtLimitIsAcceptedAndControlFramesDoNotCount() {
        let ten = [UInt8](repeating: 2, count: 10)
        let bytes = peerFrame(to: .client, .binary, fin: false, ten) + peerFrame(to: .client, .pong, [1, 2, 3])
            + peerFrame(to: .client, .continuation, ten)
        #expect(actionsAtEverySplit(.client, limits: Self.small, bytes) == [.pong([1, 2, 3]), .message(.binary(ten + ten))])
    }

    @Test func messageLimitBelowFrameLimitAppliesToSingleFrames() {
        let limits = WebSocketProtocolLimits(maxFrameSize: 100, maxMessageSize: 4)
        #expect(actionsAtEverySplit(.client, limits: limits, peerFrame(to: .client, .text, hello)) == failure(.client, .messageTooLarge))
    }

    @Test func negativeLimitsActAsZero() {
        let limits = WebSocketProtocolLimits(maxFrameSize: -1, maxMessageSize: -1)
        #expect(actions(.client, limits: limits, chunks: [peerFrame(to: .client, .text, [])]) == [.message(.text([]))])
        #expect(actions(.client, limits: limits, chunks: [peerFrame(to: .client, .text, [0x61])]) == failure(.client, .frameTooLarge))
    }
}

@Suite("RFC 6455 §5.5.2 and §5.5.3 sending control frames")
struct WebSocketProtocolSendingTests {
    @Test func writePingAndPongAcceptUpTo125BytesAndRefuseMore() throws {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        let max = [UInt8](repeating: 1, count: 125)
        try machine.writePing(payload: max, into: &buffer, using: &rng)
        try machine.writePong(payload: [], into: &buffer, using: &rng)
        #expect(buffer == ownFrame(.server, .ping, max) + ownFrame(.server, .pong, []))
        #expect(throws: WebSocketStateError.invalidArgument) { try machine.writePing(payload: max + [1], into: &buffer, using: &rng) }
        #expect(throws: WebSocketStateError.invalidArgument) { try machine.writePong(payload: max + [1], into: &buffer, using: &rng) }
        #expect(machine.state == .open)
        #expect(machine.role == .server)
    }

    @Test func writeMessageSerializesOneFinalFrame() throws {
        var machine = WebSocketProtocol(role: .server)
        var rng = TestRNG()
        var buffer: [UInt8] = []
        try machine.writeMessage(.text, payload: hello, into: &buffer, using: &rng)
        #expect(buffer == hex("81 05 48 65 6c 6c 6f"))
    }

    @Test func stateErrorsDescribeThemselves() {
        #expect(WebSocketStateError.notOpen.description != WebSocketStateError.invalidArgument.description)
    }
}
