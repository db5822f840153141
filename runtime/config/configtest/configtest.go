// Package configtest sets gocl's settings for one test, as net/http/httptest
// serves one: the environment the settings are read from, and their reload.
package configtest

import (
	"testing"

	"gocl/runtime/config"
)

// Setenv sets each key to its value (kv: key, value, ...) for the test and
// reloads the settings, and reloads them again when the test ends (the
// environment restored by t).
func Setenv(t testing.TB, kv ...string) {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("configtest.Setenv: %d arguments, want key, value pairs", len(kv))
	}
	for i := 0; i < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
	config.Reload()
	t.Cleanup(config.Reload)
}
