package snapid

// ExportWithFileIO replaces the counter's I/O seam (the lease, mark and
// heartbeat files' too).
var ExportWithFileIO = func(x fileIO) Option { return withIO(x) }
