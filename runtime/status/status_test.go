package status

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCodeOf(t *testing.T) {
	base := Errorf(Timeout, "slow")
	wrapped := fmt.Errorf("allreduce: %w", base)
	if CodeOf(wrapped) != Timeout || CodeOf(nil) != Success || CodeOf(errors.New("x")) != InternalError {
		t.Error("CodeOf does not follow the chain")
	}
}

func TestParallelCatchesPanicsAndKeepsIndexOrder(t *testing.T) {
	err := Parallel(4, func(i int) error {
		switch i {
		case 1:
			panic("boom")
		case 3:
			return errors.New("three")
		}
		return nil
	})
	if CodeOf(err) != InternalError || !strings.Contains(err.Error(), "boom") {
		t.Errorf("want the panic of index 1 as an internal error, got %v", err)
	}
	if err := Parallel(0, nil); err != nil {
		t.Errorf("no work: %v", err)
	}
}
