import Testing
@Suite struct ChatRoomPlaceholder { @Test func placeholder() { #expect(1 + 1 == 2) } }
