// Package status carries gocl's result codes (NCCL's values) through Go
// errors, so the C boundary can map any error to the right code and keep the
// sentence for goclGetLastError.
package status

import (
	"errors"
	"fmt"
	"sync"
)

// Code is a goclResult_t.
type Code int

const (
	Success            Code = 0
	UnhandledCudaError Code = 1
	SystemError        Code = 2
	InternalError      Code = 3
	InvalidArgument    Code = 4
	InvalidUsage       Code = 5
	RemoteError        Code = 6
	InProgress         Code = 7
	Timeout            Code = 8
	NumCodes           Code = 9
)

// Error is an error with a result code.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an error with code; %w wrapping is kept.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// CodeOf finds the outermost code in err's chain; errors without one are
// internal errors (a bug: every failure path should say what kind it is).
func CodeOf(err error) Code {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return InternalError
}

// Catch turns a panic in the calling goroutine into an InternalError stored
// in *err. Every goroutine gocl starts defers it: a panic on a goroutine of
// ours would otherwise kill the host process, which C callers must never see.
func Catch(err *error) {
	if r := recover(); r != nil {
		*err = Errorf(InternalError, "internal error (a gocl bug, please report it): panic: %v", r)
	}
}

// Parallel runs f(0..n-1) on their own goroutines (f(0) on the caller's when
// n is 1), catches their panics, and returns the first error by index.
func Parallel(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer Catch(&errs[i])
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
