import Foundation
import Logging
import SwitchboardCore

/// Reconnection: what follows the end of a connection (another attempt with backoff, or the
/// end), and the replay of the `onReconnect` hook and the queued commands on a new connection.
extension SocketAdapter {
    func connectionEnded(_ c: WebSocketConnection) async {
        guard connection === c else { return }
        // Queued commands being written to `c` are put back if it refuses them: wait for that.
        while flushing { await withCheckedContinuation { flushWaiters.append($0) } }
        guard connection === c else { return }
        let status = await c.closeStatus
        let error = await c.error
        ended = (status, error)
        stopRefreshing()
        let policy = reconnectPolicy
        let retry = policy.reconnects && !userClosed
            && ReconnectPolicy.isRetried(closeCode: status?.code, error: error, hasTokenProvider: tokenProvider != nil)
        connection = nil
        // What it received and the stream has not taken yet is read before anything newer.
        unreadEnded.append(c)
        if unreadEnded.count > Self.maxUnreadEndedConnections {
            unreadEnded.removeFirst()
            logger.warning("a connection's unread lines were dropped: more connections ended unread than kept",
                           metadata: ["kept": "\(Self.maxUnreadEndedConnections)"])
        }
        outbox.withLock { $0.connectionChanged(to: nil) }
        reconnecting = retry
        // Every job handing commands to `c` was scheduled on its loop before the line above;
        // once they have run, the commands they could not send are all stranded.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in c.loop.execute { done.resume() } }
        let stranded = outbox.withLock { $0.takeStranded() }
        if retry && !reconnecting {
            // `close()` ended the adapter meanwhile (and reported what was queued then).
            undeliveredCommands += stranded
            return
        }
        queuedCommands = stranded + queuedCommands
        guard retry, !userClosed else {
            finish(status: status, error: error)
            return
        }
        let lived = connectedAt.map { ContinuousClock.now - $0 } ?? .zero
        if lived >= policy.stableAfter { outageAttempts = 0 }
        logger.info("connection lost, reconnecting", metadata: ["connection": "\(c.id)",
                                                                "code": "\(status?.code.rawValue ?? 1006)",
                                                                "error": "\(error.map { "\($0)" } ?? "none")",
                                                                "uptime": "\(lived)",
                                                                "attempts": "\(outageAttempts)"])
        wakeReplacementWaiters()
        reconnectTask = Task { await self.reconnectLoop(policy) }
    }

    /// Reconnects with backoff, going on from the attempts the outage already made (a
    /// connection that ended before ``ReconnectPolicy/stableAfter`` did not end it).
    func reconnectLoop(_ policy: ReconnectPolicy) async {
        var attempt = outageAttempts
        var lastError: SwitchboardError? = ended?.error
        while true {
            attempt += 1
            if let max = policy.maxAttempts, attempt > max {
                logger.warning("giving up reconnecting", metadata: ["attempts": "\(attempt - 1)",
                                                                     "error": "\(lastError.map { "\($0)" } ?? "none")"])
                finish(status: ended?.status, error: lastError)
                return
            }
            let delay = policy.delay(forAttempt: attempt, using: &rng)
            stateContinuation.yield(.reconnecting(attempt: attempt, delay: delay))
            try? await Task.sleep(for: delay)
            guard !userClosed, !Task.isCancelled, let makeOptions else {
                finish(status: ended?.status, error: lastError)
                return
            }
            stateContinuation.yield(.connecting)
            do {
                let c = try await open(attemptOptions(makeOptions))
                guard !userClosed else {
                    await c.close(code: .goingAway)
                    finish(status: ended?.status, error: lastError)
                    return
                }
                outageAttempts = attempt
                replayingConnection = c
                await install(c, acceptingCommands: false)
                reconnecting = false
                stateContinuation.yield(.connected)
                logger.info("reconnected", metadata: ["connection": "\(c.id)", "attempt": "\(attempt)"])
                await replay(to: c)
                wakeReplacementWaiters()
                return
            } catch {
                lastError = error
                if !ReconnectPolicy.isRetried(closeCode: nil, error: error, hasTokenProvider: tokenProvider != nil) {
                    ended = (ended?.status, error)
                    finish(status: ended?.status, error: error)
                    return
                }
            }
        }
    }

    /// On a new connection, before any other sender: the `onReconnect` hook, then the queued
    /// commands in order. Those `c` refuses (it ended meanwhile) stay queued, first, for the
    /// next connection. Then ``send(command:)`` may take the quick way to `c`.
    func replay(to c: WebSocketConnection) async {
        if let hook = reconnectHook {
            do {
                try await Self.$inReconnectHook.withValue(true) { try await hook(self) }
            } catch {
                logger.warning("onReconnect hook failed", metadata: ["error": "\(error)"])
            }
        }
        if connection === c {
            flushing = true
            let queued = queuedCommands
            queuedCommands = []
            var sent = 0
            while sent < queued.count {
                do { try await c.send(text: queued[sent]) } catch { break }
                sent += 1
            }
            queuedCommands = Array(queued[sent...]) + queuedCommands
            flushing = false
            let waiters = flushWaiters
            flushWaiters = []
            for w in waiters { w.resume() }
            if sent < queued.count {
                logger.info("connection ended before the queued commands were sent; they wait for the next one",
                            metadata: ["connection": "\(c.id)", "unsent": "\(queued.count - sent)"])
            } else if connection === c {
                outbox.withLock { $0.connectionChanged(to: c) }
            }
        }
        if replayingConnection === c {
            replayingConnection = nil
            let waiters = replayWaiters
            replayWaiters = []
            for w in waiters { w.resume() }
        }
    }

    func finish(status: WebSocketCloseStatus?, error: SwitchboardError?) {
        connection = nil
        outbox.withLock { $0.connectionChanged(to: nil) }
        reconnecting = false
        undeliveredCommands += outbox.withLock { $0.takeStranded() } + queuedCommands
        queuedCommands = []
        if !undeliveredCommands.isEmpty {
            logger.warning("commands were not delivered: no connection took them",
                           metadata: ["commands": "\(undeliveredCommands.count)"])
        }
        ended = (status, error)
        stateContinuation.yield(.closed(code: status?.code, reason: status?.reason ?? "", error: error))
        wakeReplacementWaiters()
    }
}
