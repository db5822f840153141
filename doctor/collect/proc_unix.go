//go:build unix

package collect

import (
	"os/exec"
	"syscall"
	"time"
)

// killGroup makes a timeout kill the probe and everything it started
// (torch and JAX start helper processes and threads).
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 2 * time.Second
}
