import SpawnSupport

/// Every process this module starts goes through `posix_spawn` (``ChildProcess``), not
/// Foundation's `Process`, whose Linux launch reads past a buffer and crashed the test process
/// in CI (swift-corelibs-foundation#5472). Declared in this module, it shadows Foundation's name.
typealias Process = SpawnSupport.ChildProcess
