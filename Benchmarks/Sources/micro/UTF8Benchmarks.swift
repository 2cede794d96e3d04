import SwitchboardCore

/// `UTF8Validator` over a whole 1 MiB text payload, as one text message's unmasked bytes.
enum UTF8Benchmarks {
    static func all() -> [Benchmark] {
        [
            validate("ASCII", Fixtures.asciiText(Fixtures.mebi)),
            validate("mixed 1–4 byte scalars", Fixtures.mixedText(Fixtures.mebi)),
        ]
    }

    static func validate(_ label: String, _ bytes: [UInt8]) -> Benchmark {
        let buffer = UnsafeRawBufferPointer(Fixtures.rawCopy(bytes))
        var check = UTF8Validator()
        precondition(check.validate(buffer) && check.isComplete, "fixture is not valid UTF-8")
        return Benchmark(
            name: "UTF-8 validation: 1 MiB \(label)",
            metric: .bytes, bytesPerIteration: buffer.count, opsPerIteration: 1, opUnit: "call"
        ) { iterations in
            for _ in 0..<iterations {
                var validator = UTF8Validator()
                let valid = validator.validate(opaque(buffer)) && validator.isComplete
                blackHole(valid)
            }
        }
    }
}
