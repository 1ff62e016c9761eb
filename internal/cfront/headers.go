package cfront

import "embed"

// headers holds the package's C headers. Nothing reads it: embedding them
// is what puts their content into this package's build id, so that the go
// command rebuilds the fronts (and their tests) when a header changes. It
// hashes a package's own .h files only when that package uses cgo, and
// this one does not; a dependency's headers it does not look at.
//
//go:embed *.h
var headers embed.FS
