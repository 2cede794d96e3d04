/// Encodes commands as RESP2 arrays of bulk strings (what Redis expects from clients).
public enum RESPEncoder {
    /// Appends `*N\r\n` then `$len\r\n<bytes>\r\n` per argument.
    public static func append(command arguments: [[UInt8]], to buffer: inout [UInt8]) {
        buffer.reserveCapacity(buffer.count + 16 + arguments.reduce(0) { $0 + $1.count + 16 })
        buffer.append(UInt8(ascii: "*"))
        appendDecimal(arguments.count, to: &buffer)
        for argument in arguments {
            buffer.append(UInt8(ascii: "$"))
            appendDecimal(argument.count, to: &buffer)
            buffer.append(contentsOf: argument)
            buffer.append(13)
            buffer.append(10)
        }
    }

    /// One command from strings (UTF-8).
    public static func command(_ arguments: [String]) -> [UInt8] {
        var buffer: [UInt8] = []
        append(command: arguments.map { Array($0.utf8) }, to: &buffer)
        return buffer
    }

    /// `n` in decimal, then CRLF (`n` is a count: never negative).
    private static func appendDecimal(_ n: Int, to buffer: inout [UInt8]) {
        var digits: [UInt8] = []
        var v = n.magnitude
        repeat {
            digits.append(UInt8(ascii: "0") + UInt8(v % 10))
            v /= 10
        } while v > 0
        buffer.append(contentsOf: digits.reversed())
        buffer.append(13)
        buffer.append(10)
    }
}
