package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// child is a server process the receive benchmark measures. It is always
// stopped by its own PID: SIGTERM, a wait for the clean shutdown, and
// SIGKILL only if that does not come.
type child struct {
	name string
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	err  error // the exit status, once done is closed

	stopOnce sync.Once
}

// startChild runs bin with args, copies its stderr to logPath, and waits
// for the address it logs: every server here logs one JSON line with an
// "addr" field once it listens (hookledger's "hookledger serving" line).
func startChild(ctx context.Context, name, bin string, args []string, logPath string) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Bytes()
			fmt.Fprintf(logFile, "%s\n", line)
			if found {
				continue
			}
			var rec struct {
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Addr != "" {
				found = true
				addrc <- rec.Addr
			}
		}
		// Drain whatever is left so the child never blocks on a full pipe.
		_, _ = io.Copy(logFile, stderr)
	}()
	go func() {
		// The pipe must be read to its end before Wait closes it.
		<-scanned
		c.err = cmd.Wait()
		logFile.Close()
		close(c.done)
	}()

	select {
	case c.addr = <-addrc:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("start %s: exited before listening (%v); see %s", name, c.err, logPath)
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	stopErr := c.stop()
	return nil, errors.Join(fmt.Errorf("start %s: no listen address logged; see %s", name, logPath), stopErr)
}

// stop sends SIGTERM to the child's PID and waits for it to exit; after
// grace it sends SIGKILL. It returns the child's exit error, if any.
func (c *child) stop() error {
	c.stopOnce.Do(func() {
		select {
		case <-c.done:
			return
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
			c.err = fmt.Errorf("%s did not stop within 30s of SIGTERM; killed", c.name)
		}
	})
	<-c.done
	if c.err != nil {
		return fmt.Errorf("%s (pid %d): %w", c.name, c.cmd.Process.Pid, c.err)
	}
	return nil
}
