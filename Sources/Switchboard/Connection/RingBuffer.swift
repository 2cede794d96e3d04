/// A growable FIFO queue with O(1) push and pop (a ring over an array).
struct RingBuffer<Element> {
    private var storage: [Element?] = []
    private var head = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    mutating func append(_ element: Element) {
        if count == storage.count {
            grow()
        }
        storage[(head + count) % storage.count] = element
        count += 1
    }

    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let e = storage[head]
        storage[head] = nil
        head = (head + 1) % storage.count
        count -= 1
        if count == 0 {
            head = 0
            if storage.count > 64 { storage = [] }
        }
        return e
    }

    mutating func removeAll() {
        storage = []
        head = 0
        count = 0
    }

    private mutating func grow() {
        let newCapacity = max(4, storage.count * 2)
        var new = [Element?](repeating: nil, count: newCapacity)
        for i in 0..<count {
            new[i] = storage[(head + i) % storage.count]
        }
        storage = new
        head = 0
    }
}
