import SwitchboardRedis
import Testing

struct RESPEncoderTests {
    @Test func exactBytes() {
        #expect(RESPEncoder.command(["PING"]) == Array("*1\r\n$4\r\nPING\r\n".utf8))
        #expect(RESPEncoder.command(["SET", "k", ""]) == Array("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".utf8))
        var buffer: [UInt8] = []
        RESPEncoder.append(command: [Array("SET".utf8), [0, 13, 10, 0xFF]], to: &buffer)
        #expect(buffer == Array("*2\r\n$3\r\nSET\r\n$4\r\n".utf8) + [0, 13, 10, 0xFF] + [13, 10])
        // Ten or more arguments, and long ones: multi-digit lengths.
        let long = String(repeating: "x", count: 12_345)
        let encoded = RESPEncoder.command(Array(repeating: long, count: 10))
        #expect(encoded.starts(with: Array("*10\r\n$12345\r\n".utf8)))
    }

    @Test func roundTripThroughTheParser() throws {
        let arguments: [[UInt8]] = [Array("EVAL".utf8), [], [0, 13, 10], Array("é✓".utf8)]
        var buffer: [UInt8] = []
        RESPEncoder.append(command: arguments, to: &buffer)
        var parser = RESPParser()
        parser.append(buffer)
        #expect(try parser.next() == .array(arguments.map { .bulkString($0) }))
    }
}
