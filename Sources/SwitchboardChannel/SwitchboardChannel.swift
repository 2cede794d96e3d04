@_exported import Switchboard
