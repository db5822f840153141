//go:build cgo

package config

/*
#include <stdlib.h>
#include <string.h>

extern char **environ;

// gocl_environ_at returns entry i of the C environment (NULL past the end).
static const char *gocl_environ_at(size_t i) { return environ[i]; }
*/
import "C"

import (
	"os"
	"unsafe"
)

// This file is the one place gocl reads the process environment. A Go
// c-shared library's os.Getenv sees a copy taken when the library was
// loaded; what the program sets later (Python's os.environ[...] = ...,
// C's setenv, launch helpers) lives only in libc's environment, so gocl
// asks libc, as NCCL's getenv does.

// LookupEnv returns the value of environment variable name as the process
// sees it now.
func LookupEnv(name string) (string, bool) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	v := C.getenv(cname)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}

// Environ returns the process's environment now, as "NAME=value" entries.
func Environ() []string {
	var env []string
	for i := C.size_t(0); ; i++ {
		e := C.gocl_environ_at(i)
		if e == nil {
			return env
		}
		env = append(env, C.GoString(e))
	}
}

// Setenv sets an environment variable for the whole process: libc's
// environment (which NCCL and XLA read) and Go's copy.
func Setenv(name, value string) error { return os.Setenv(name, value) }

// cSetenv changes only libc's environment, as a C program or Python does
// (tests use it to prove that gocl sees such changes).
func cSetenv(name, value string) {
	cname, cvalue := C.CString(name), C.CString(value)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cvalue))
	C.setenv(cname, cvalue, 1)
}

func cUnsetenv(name string) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	C.unsetenv(cname)
}
