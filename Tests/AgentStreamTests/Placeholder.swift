import Testing
@Suite struct AgentStreamPlaceholder { @Test func placeholder() { #expect(1 + 1 == 2) } }
