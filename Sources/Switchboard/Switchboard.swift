@_exported import SwitchboardCore
