package telemetry

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
)

// The status endpoint (GOCL_STATUS): every process with a communicator
// answers `gocl status` and `gocl top` on a Unix socket, DIR/PID.sock, DIR
// being GOCL_STATUS_DIR, else $XDG_RUNTIME_DIR/gocl, else /tmp/gocl-UID
// (mode 0700, this user's; a symlink there, another owner or a wider mode
// is refused: openStatusDir). A client proves it may ask with the handshake
// the communicators use (bootstrap's HMAC challenge), keyed by DIR/PID.key,
// which only this user can read; GOCL_STATUS=tcp:HOST:PORT also listens on
// TCP, keyed by GOCL_STATUS_TOKEN. What it answers is the caller's
// (runtime/comm: the process's communicators and, on rank 0, every rank's).

// StatusDir is where the Unix sockets of this user's processes are.
func StatusDir() string {
	if d := strings.TrimSpace(config.String("STATUS_DIR")); d != "" {
		return d
	}
	if d, _ := config.LookupEnv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gocl")
	}
	return filepath.Join(os.TempDir(), "gocl-"+strconv.Itoa(os.Getuid()))
}

// ListenStatus starts this process's status endpoint for GOCL_STATUS=mode
// (1 or on: the Unix socket; tcp:HOST:PORT: TCP too), answering each
// client's request with serve.
func ListenStatus(mode string, serve func(bootstrap.Request) any) error {
	tcp, isTCP := strings.CutPrefix(mode, "tcp:")
	token := strings.TrimSpace(config.String("STATUS_TOKEN"))
	switch {
	case isTCP:
		if err := checkStatusToken(token, mode); err != nil {
			return err
		}
	case mode != "" && mode != "1" && !strings.EqualFold(mode, "on"):
		return fmt.Errorf("GOCL_STATUS=%q: give 1 (a Unix socket, the default), tcp:HOST:PORT (also TCP), or 0 (off)", mode)
	}
	dir := StatusDir()
	fd, st, err := openStatusDir(dir)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	sweepStatusDir(dir)
	key := make([]byte, 32)
	rand.Read(key)
	name := strconv.Itoa(os.Getpid())
	base := filepath.Join(dir, name)
	os.Remove(base + ".sock") // a process that had this pid before
	// The key is written through the checked directory's descriptor, so a
	// path swapped since the check cannot redirect it.
	if err := writeKeyAt(fd, name+".key", []byte(hex.EncodeToString(key))); err != nil {
		return fmt.Errorf("status directory %s: writing %s.key: %v", dir, name, err)
	}
	ln, err := net.Listen("unix", base+".sock")
	if err != nil {
		return err
	}
	// bind(2) takes a path: make sure it still leads to the directory checked.
	var now syscall.Stat_t
	if err := syscall.Lstat(dir, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		ln.Close()
		return fmt.Errorf("status directory %s was replaced while the endpoint started: remove it, or set GOCL_STATUS_DIR to a directory only you can read", dir)
	}
	go bootstrap.ServeUnsealed(ln, -1, key, serve)
	if isTCP {
		tl, err := net.Listen("tcp", tcp)
		if err != nil {
			return fmt.Errorf("GOCL_STATUS=%s: %v", mode, err)
		}
		go bootstrap.ServeUnsealed(tl, -1, []byte(token), serve)
	}
	return nil
}

// openStatusDir makes dir (mode 0700) if it is not there and opens it
// without following a symlink: another user who planted a symlink (or a
// directory of their own) at /tmp/gocl-UID must not get the keys. It
// refuses unless dir is a directory this user owns that nobody else may
// enter. It returns the open directory and what it is.
func openStatusDir(dir string) (int, syscall.Stat_t, error) {
	var st syscall.Stat_t
	if parent := filepath.Dir(dir); parent != dir {
		os.MkdirAll(parent, 0o700) // GOCL_STATUS_DIR may name a new tree; the last component is what is checked
	}
	if err := syscall.Mkdir(dir, 0o700); err != nil && err != syscall.EEXIST {
		return -1, st, fmt.Errorf("status directory %s: cannot make it: %v (set GOCL_STATUS_DIR to a directory only you can read)", dir, err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		why := err.Error()
		var lst syscall.Stat_t
		if syscall.Lstat(dir, &lst) == nil {
			switch lst.Mode & syscall.S_IFMT {
			case syscall.S_IFLNK:
				why = "it is a symlink (someone may have planted it to read your status keys)"
			case syscall.S_IFDIR:
			default:
				why = "it is not a directory"
			}
		}
		return -1, st, fmt.Errorf("status directory %s refused: %s: remove it, or set GOCL_STATUS_DIR to a directory only you can read", dir, why)
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, st, fmt.Errorf("status directory %s: %v", dir, err)
	}
	var why string
	switch {
	case int(st.Uid) != os.Getuid():
		why = fmt.Sprintf("it is owned by uid %d, not by you (uid %d)", st.Uid, os.Getuid())
	case st.Mode&0o077 != 0:
		why = fmt.Sprintf("it has mode %04o, so others may enter it: chmod 700 %s", st.Mode&0o7777, dir)
	}
	if why != "" {
		syscall.Close(fd)
		return -1, st, fmt.Errorf("status directory %s refused: %s, remove it, or set GOCL_STATUS_DIR to a directory only you can read", dir, why)
	}
	return fd, st, nil
}

// writeKeyAt writes a key file in the directory open as dirfd, mode 0600,
// replacing one a process of the same pid left, never through a symlink.
func writeKeyAt(dirfd int, name string, b []byte) error {
	syscall.Unlinkat(dirfd, name)
	fd, err := syscall.Openat(dirfd, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkStatusToken says why token cannot key GOCL_STATUS=mode, or nil.
func checkStatusToken(token, mode string) error {
	if token == "" {
		return fmt.Errorf("GOCL_STATUS=%s asks for TCP but GOCL_STATUS_TOKEN is not set: set it to a secret the clients share (gocl status --connect HOST:PORT reads it from the same variable); %s makes one", mode, bootstrap.MakeSecret)
	}
	if n, distinct, ok := bootstrap.SecretStrength(token); !ok {
		return fmt.Errorf("GOCL_STATUS_TOKEN is too weak for GOCL_STATUS=%s (%d characters, %d different; it needs at least %d, %d different, as 128 random bits give): one seen handshake lets it be guessed offline; %s makes a good one",
			mode, n, distinct, bootstrap.MinSecretLen, bootstrap.MinSecretDistinct, bootstrap.MakeSecret)
	}
	return nil
}

// sweepStatusDir removes the sockets and keys of processes that are gone.
func sweepStatusDir(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	for _, n := range names {
		pid, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(n), ".sock"))
		if err != nil {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			os.Remove(n)
			os.Remove(strings.TrimSuffix(n, ".sock") + ".key")
		}
	}
}
