// Package main is gocl's C boundary, built with -buildmode=c-shared into
// libgocl.so. The public functions live in gocl.c (they refuse to enter Go
// after fork); they call the goclgo* exports here, which turn C arguments
// into runtime calls, map errors to result codes and keep the sentence for
// goclGetLastError. No panic crosses this boundary.
package main

// #include "gocl.h"
import "C"

// The JAX FFI handlers live in the same library.
import _ "gocl/jaxffi"

func main() {}
