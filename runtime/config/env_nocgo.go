//go:build !cgo

package config

import "os"

// Without cgo there is no C environment apart from Go's: a pure Go program
// (never the c-shared library, which needs cgo) reads its own.

func LookupEnv(name string) (string, bool) { return os.LookupEnv(name) }
func Environ() []string                    { return os.Environ() }
func Setenv(name, value string) error      { return os.Setenv(name, value) }
func cSetenv(name, value string)           { os.Setenv(name, value) }
func cUnsetenv(name string)                { os.Unsetenv(name) }
