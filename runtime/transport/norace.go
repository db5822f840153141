//go:build !race

package transport

// RaceRelease marks a frame as published (race builds only).
func RaceRelease() {}

// RaceAcquire marks a frame as received (race builds only).
func RaceAcquire() {}
