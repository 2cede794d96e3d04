// Memory of the server's topic replay buffers (WebSocketServerConfiguration.topicReplay):
// fills TOPICS topics with as many messages of SIZE bytes as the default limits keep, and
// prints the heap bytes per topic (glibc's mallinfo2, before and after) beside the payload
// bytes the buffers report. Then ages everything out and checks that idle topics cost nothing.
//
//   replay-memory [TOPICS] [SIZE] [MESSAGES]    (defaults: 1000 topics, 100 B, 150 per topic)

import CMallocCounter
import Switchboard

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let topics = arguments.count > 0 ? arguments[0] : 1_000
let size = arguments.count > 1 ? arguments[1] : 100
let messages = arguments.count > 2 ? arguments[2] : 150

func heap() -> Int { Int(switchboard_heap_in_use()) }

var configuration = WebSocketServerConfiguration(host: "127.0.0.1", port: 0)
// Stamped like a real application would: `SEQ ` before the body.
configuration.topicReplay = TopicReplayConfiguration(maxAge: .seconds(2)) { position, message in
    guard case .text(let body) = message else { return message }
    return .text(Array("\(position.sequence) ".utf8) + body)
}
let defaults = TopicReplayConfiguration()
let server = WebSocketServer(configuration: configuration)
let body = String(repeating: "x", count: max(0, size - 5)) + "\n"
let names = (0..<topics).map { "topic-\($0)" }

let before = heap()
for round in 0..<messages {
    for name in names { _ = server.publishNow(.text(Array(body.utf8)), to: name) }
    _ = round
}
let after = heap()
let stats = server.statistics
let perTopic = Double(after - before) / Double(topics)
let payloadPerTopic = stats.topicHistoryBytes / topics
let kept = max(1, Int((Double(payloadPerTopic) / Double(size)).rounded()))
print("topics=\(topics) message≈\(size)B published/topic=\(messages) kept/topic=\(kept) (limits: \(defaults.maxMessages) messages, \(defaults.maxBytes / 1024) KiB)")
print("heap per topic: \(String(format: "%.1f", perTopic / 1024)) KiB (\(Int(perTopic / Double(kept))) B per kept message); payload kept per topic: \(payloadPerTopic) B")

// Idle: past maxAge with no subscriber, the sweep forgets every topic.
var waited = 0
while server.statistics.topicHistories > 0 && waited < 100 {
    try await Task.sleep(for: .milliseconds(100))
    waited += 1
}
print("after 2 s idle: histories=\(server.statistics.topicHistories), heap above the start: \((heap() - before) / 1024) KiB")
