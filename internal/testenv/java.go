package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// KafkaLib returns the directory of Kafka's cached jars (TIDEMARK_KAFKA_LIB, exported by deploy/local/kafka.sh): the
// broker's own command-line tools and Java clients run from it. It skips the test, or fails it under CI=true, when unset.
func KafkaLib(t testing.TB) string {
	t.Helper()
	return require(t, "TIDEMARK_KAFKA_LIB", "Kafka's jars")
}

// StreamsAppClasspath returns the classpath of the Kafka Streams test application (TIDEMARK_STREAMS_APP_CP, exported
// by deploy/local/streams.sh).
func StreamsAppClasspath(t testing.TB) string {
	t.Helper()
	return require(t, "TIDEMARK_STREAMS_APP_CP", "the Kafka Streams test app")
}

// KafkaTool runs one of Kafka's command-line classes (e.g. org.apache.kafka.tools.consumer.group.ShareGroupCommand)
// to completion, bounded by a minute, and returns its standard output; the test fails when it exits non-zero.
func KafkaTool(t testing.TB, class string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", append([]string{"-Xmx256m", "-cp", KafkaLib(t) + "/*", class}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", class, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// JavaProcess is a JVM a test started (a Kafka console consumer, a share consumer, the streams app). It is stopped
// at the end of the test; Pause and Resume freeze and thaw it (SIGSTOP, SIGCONT) so that a group member stays in the
// group without consuming, which is how a real stuck consumer looks to the broker until its session times out.
type JavaProcess struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit status, set before done is closed

	mu    sync.Mutex // guards lines and cond's waiters
	cond  *sync.Cond
	lines []string // stdout lines so far
	errb  bytes.Buffer
}

// StartJava starts class from classpath with args and a small heap. Its stdout is kept line by line (WaitLine); the
// process is stopped (SIGTERM, SIGKILL after 20 s) when the test ends.
func StartJava(t testing.TB, classpath, class string, args ...string) *JavaProcess {
	t.Helper()
	return startJava(t, nil, nil, classpath, class, args...)
}

func startJava(t testing.TB, env, jvmOpts []string, classpath, class string, args ...string) *JavaProcess {
	t.Helper()
	argv := append([]string{"-Xmx256m", "-XX:+UseSerialGC"}, jvmOpts...)
	return startProcess(t, class[strings.LastIndex(class, ".")+1:], env, "java", append(append(argv, "-cp", classpath, class), args...)...)
}

// StartProcess starts any program (name: how failures call it) with args and env added to the test's own, kept and
// stopped as StartJava's JVMs are: stdout line by line (WaitLine, Output), stderr for failure messages, SIGTERM then
// SIGKILL when the test ends.
func StartProcess(t testing.TB, name string, env []string, program string, args ...string) *JavaProcess {
	t.Helper()
	return startProcess(t, name, env, program, args...)
}

func startProcess(t testing.TB, name string, env []string, program string, args ...string) *JavaProcess {
	t.Helper()
	p := &JavaProcess{t: t, name: name, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.cmd = exec.Command(program, args...)
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.errb}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.cond.Broadcast()
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := p.cmd.Wait()
		p.mu.Lock()
		p.err = err
		close(p.done)
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	t.Cleanup(p.Stop)
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Lines returns the number of stdout lines printed so far.
func (p *JavaProcess) Lines() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// Exited reports whether the process has exited.
func (p *JavaProcess) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stderr returns the last 4,000 bytes the process wrote to stderr.
func (p *JavaProcess) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return tail(p.errb.String())
}

// WaitLine waits (up to timeout) for a stdout line containing s; the test fails if the process exits or the time runs
// out first.
func (p *JavaProcess) WaitLine(s string, timeout time.Duration) {
	p.t.Helper()
	i := 0
	p.waitFor(fmt.Sprintf("print %q", s), timeout, func() bool {
		for ; i < len(p.lines); i++ {
			if strings.Contains(p.lines[i], s) {
				return true
			}
		}
		return false
	})
}

// WaitLines waits (up to timeout) until the process has printed at least n stdout lines (a console consumer: n
// records); the test fails if the process exits or the time runs out first.
func (p *JavaProcess) WaitLines(n int, timeout time.Duration) {
	p.t.Helper()
	p.waitFor(fmt.Sprintf("print %d lines", n), timeout, func() bool { return len(p.lines) >= n })
}

// waitFor waits until ok (called with p.mu held) holds, the process exits or timeout passes.
func (p *JavaProcess) waitFor(what string, timeout time.Duration, ok func() bool) {
	p.t.Helper()
	deadline := time.AfterFunc(timeout, func() { p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() })
	defer deadline.Stop()
	end := time.Now().Add(timeout)
	p.mu.Lock()
	defer p.mu.Unlock()
	for !ok() {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before it did %s (%d lines); stderr:\n%s", p.name, p.err, what, len(p.lines), tail(p.errb.String()))
		default:
		}
		if !time.Now().Before(end) {
			p.t.Fatalf("%s did not %s within %s (%d lines); stderr:\n%s", p.name, what, timeout, len(p.lines), tail(p.errb.String()))
		}
		p.cond.Wait()
	}
}

// Wait waits (up to timeout) for the process to exit by itself and fails the test if it exits non-zero or not at all.
func (p *JavaProcess) Wait(timeout time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s still running after %s", p.name, timeout)
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v; stderr:\n%s", p.name, p.err, tail(p.errb.String()))
	}
}

// Pause freezes the process (SIGSTOP) and returns once every one of its threads has stopped: it then stops consuming,
// acknowledging and heartbeating, but its connections stay open. kill(2) only queues the signal; a thread that is
// running (the client's network thread on the other core, say) goes on until it next enters the kernel, and a thread
// in an uninterruptible sleep until it wakes. The kernel completes the group stop when the last thread stops and only
// then reports the child stopped to its parent (waitid WSTOPPED), so that report is the synchronisation. Each thread
// is then checked in /proc/<pid>/task/*/stat (state T).
func (p *JavaProcess) Pause() {
	p.t.Helper()
	p.signal(syscall.SIGSTOP)
	pid := p.cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			p.t.Fatalf("wait for %s (pid %d) to stop: %v", p.name, pid, err)
		}
		break
	}
	if err := allThreadsStopped(pid); err != nil {
		p.t.Fatalf("%s reported stopped: %v", p.name, err)
	}
}

// allThreadsStopped returns an error naming any thread of pid whose /proc state is not T (stopped by a signal).
func allThreadsStopped(pid int) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var running []string
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			return err
		}
		// pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return fmt.Errorf("unparsable %s/%s/stat: %q", dir, task.Name(), b)
		}
		if st := b[i+2]; st != 'T' {
			running = append(running, fmt.Sprintf("%s (%c)", task.Name(), st))
		}
	}
	if len(running) > 0 {
		return fmt.Errorf("%d of %d threads not stopped: %s", len(running), len(tasks), strings.Join(running, ", "))
	}
	return nil
}

// Resume thaws a paused process (SIGCONT).
func (p *JavaProcess) Resume() { p.signal(syscall.SIGCONT) }

func (p *JavaProcess) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		p.t.Fatalf("signal %s: %v", p.name, err)
	}
}

// Stop ends the process: SIGCONT (in case it is paused) and SIGTERM, so a consumer leaves its group cleanly, then
// SIGKILL if it has not exited within 20 s. It returns when the process is gone; calling it again is a no-op.
func (p *JavaProcess) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// OTelApp returns the classpath of the plain Kafka test application and the path of the OpenTelemetry Java agent
// (TIDEMARK_OTEL_APP_CP and TIDEMARK_OTEL_JAVAAGENT, exported by deploy/local/otel-app.sh).
func OTelApp(t testing.TB) (classpath, agent string) {
	t.Helper()
	return require(t, "TIDEMARK_OTEL_APP_CP", "the OpenTelemetry test app"), require(t, "TIDEMARK_OTEL_JAVAAGENT", "the OpenTelemetry Java agent")
}

// StartJavaWith is StartJava with extra JVM options (e.g. -javaagent) and environment (e.g. libfaketime's
// LD_PRELOAD and FAKETIME) added to the test's own.
func StartJavaWith(t testing.TB, env, jvmOpts []string, classpath, class string, args ...string) *JavaProcess {
	t.Helper()
	return startJava(t, env, jvmOpts, classpath, class, args...)
}

// Output returns the stdout lines printed so far.
func (p *JavaProcess) Output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// OTelPy returns the Python of the venv with confluent-kafka and OpenTelemetry's confluent-kafka instrumentation, and
// the plain Python test application (TIDEMARK_OTEL_PY and TIDEMARK_OTEL_PY_APP, exported by deploy/local/otel-py.sh).
func OTelPy(t testing.TB) (python, app string) {
	t.Helper()
	return require(t, "TIDEMARK_OTEL_PY", "the Python OpenTelemetry test venv"), require(t, "TIDEMARK_OTEL_PY_APP", "the Python OpenTelemetry test app")
}
