package wasmpost

// Finish turns the module Go's linker wrote into the one hashlb ships: the
// callbacks it does not handle are no longer exported (Unhandled).
func Finish(module []byte) ([]byte, error) { return DropExports(module, Unhandled) }
