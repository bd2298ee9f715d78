//go:build !cgo

package polylb

// The binding calls the C library through cgo. Without cgo (CGO_ENABLED=0, or
// no C compiler found, when Go turns it off by itself) every other file of the
// package is left out of the build, so that this line is its only error and
// says what to do, instead of a dozen "undefined: Balancer" lines.
var _ = polylb_needs_cgo__set_CGO_ENABLED_1_and_install_a_C_compiler
