// Optimization barriers. Each function is opaque to the optimizer (never inlined, never
// optimized), so the work producing its argument cannot be deleted, and a value passed through
// `opaque` cannot be assumed unchanged, so work on it cannot be hoisted out of a loop.
// Non-generic overloads keep the call cheap (no metadata) for nanosecond-scale operations.

@inline(never) @_optimize(none)
func blackHole(_ value: Int) {}

@inline(never) @_optimize(none)
func blackHole(_ value: Bool) {}

@inline(never) @_optimize(none)
func blackHole(_ value: UInt8) {}

@inline(never) @_optimize(none)
func blackHole(_ value: AnyObject) {}

@inline(never) @_optimize(none)
func opaque(_ buffer: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer { buffer }

@inline(never) @_optimize(none)
func opaque(_ buffer: UnsafeMutableRawBufferPointer) -> UnsafeMutableRawBufferPointer { buffer }
