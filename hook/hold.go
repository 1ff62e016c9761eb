package hook

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// HoldStage is the hook's internal mode for the process holdNetlink
// starts; runtimes never pass it.
const HoldStage = "hold-netlink"

// holdTimeout bounds a holder whose parent's end of the pipe leaked.
var holdTimeout = 10 * time.Second

// keep holds the write end of each holder's pipe until the hook exits (an
// *os.File closes its descriptor when garbage-collected).
var keep []*os.File

// holdNetlink is nftables.Engine.HandOff for poststop: it starts a copy of
// the hook that holds the netlink socket of the removal (descriptor 3)
// until this hook has exited, so that the socket's last close — and the
// kernel's RCU grace period it waits for — happens in the copy,
// which runc does not wait for, instead of in this process's exit, which
// it does. The table is already gone; only the freeing of its memory is
// left. The copy learns that the hook exited from the end of its stdin,
// a pipe whose write end only the hook holds; its stdout and stderr are
// /dev/null, so runc, which reads the hook's output to its end, does not
// wait for it either.
func holdNetlink(sock *os.File) error {
	defer sock.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command("/proc/self/exe", HoldStage)
	cmd.Stdin = r
	cmd.ExtraFiles = []*os.File{sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	// Never waited for: it outlives the hook and is reaped by whoever
	// adopts it.
	_ = cmd.Process.Release()
	keep = append(keep, w)
	return nil
}

// hold is the holder's side: it returns when stdin ends (the hook exited)
// or after holdTimeout, and its exit closes the socket it inherited.
func hold(stdin io.Reader) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(holdTimeout):
	}
}
