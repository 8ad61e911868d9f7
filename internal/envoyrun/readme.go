package envoyrun

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ReadmeCurl is one curl line of the README's quick start and what the
// README says the demo answers.
type ReadmeCurl struct {
	Line     string      // the command, as shown
	URL      string      // http://127.0.0.1:10000/…
	Header   http.Header // its -H headers
	Service  string      // the backend the answer names ("b3")
	Body     string      // "backend b3 (127.0.0.1:18083)"
	Decision string      // the X-Hashlb-Decision value shown, or ""
}

var (
	readmeBody     = regexp.MustCompile(`backend (b[0-9]+) \(127\.0\.0\.1:[0-9]+\)`)
	readmeDecision = regexp.MustCompile(`(?i)X-Hashlb-Decision: *(.*?) *$`)
)

// ReadmeCurls returns the README's quick-start curl lines: those of the sh
// block after "prints a line to try", each with the comments that follow it
// on its line and on comment-only lines below it.
func ReadmeCurls(t testing.TB) []ReadmeCurl {
	t.Helper()
	readme := string(ReadRepoFile(t, "README.md"))
	_, after, ok := strings.Cut(readme, "prints a line to try")
	if !ok {
		t.Fatal(`README.md: no "prints a line to try" before the quick start's curl lines`)
	}
	_, block, _ := strings.Cut(after, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	var out []ReadmeCurl
	var comments []string
	flush := func() {
		if len(out) == 0 {
			return
		}
		c := &out[len(out)-1]
		text := strings.Join(comments, "\n")
		if m := readmeBody.FindStringSubmatch(text); m != nil {
			c.Service, c.Body = m[1], m[0]
		}
		for _, cm := range comments {
			if m := readmeDecision.FindStringSubmatch(cm); m != nil {
				c.Decision = m[1]
			}
		}
		comments = nil
	}
	for _, line := range strings.Split(block, "\n") {
		cmd, comment, _ := strings.Cut(line, "#")
		cmd = strings.TrimSpace(cmd)
		if cmd != "" {
			flush()
			args := ShellWords(cmd)
			if args[0] != "curl" {
				t.Fatalf("README.md quick start: %q is not a curl line", cmd)
			}
			c := ReadmeCurl{Line: cmd, Header: http.Header{}}
			for i := 1; i < len(args); i++ {
				switch a := args[i]; {
				case a == "-H" && i+1 < len(args):
					k, v, _ := strings.Cut(args[i+1], ":")
					c.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
					i++
				case strings.HasPrefix(a, "http://"):
					c.URL = a
				case a == "-s" || a == "-si" || a == "-i" || a == "-v":
				default:
					t.Fatalf("README.md quick start: %q: argument %q this test does not know", cmd, a)
				}
			}
			out = append(out, c)
		}
		if strings.TrimSpace(comment) != "" {
			comments = append(comments, comment)
		}
	}
	flush()
	if len(out) != 3 {
		t.Fatalf("README.md quick start: %d curl lines, want the three the demo answers", len(out))
	}
	decisions := 0
	for _, c := range out {
		if c.URL == "" || c.Body == "" {
			t.Fatalf("README.md quick start: %q: want a URL and a comment saying which backend answers", c.Line)
		}
		if c.Decision != "" {
			decisions++
		}
	}
	if decisions == 0 {
		t.Fatal("README.md quick start: no line shows X-Hashlb-Decision")
	}
	return out
}

// ShellWords splits a command line at spaces outside single quotes.
func ShellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, word := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, word = !quoted, true
		case r == ' ' && !quoted:
			if word {
				out = append(out, cur.String())
				cur.Reset()
				word = false
			}
		default:
			cur.WriteRune(r)
			word = true
		}
	}
	if word {
		out = append(out, cur.String())
	}
	return out
}

// CurlAnswer is what a client sees for one request.
type CurlAnswer struct {
	Status   int
	Body     string
	Decision string
	Header   http.Header
}

// Send makes c's request, its host and port replaced by listener.
func (c ReadmeCurl) Send(t testing.TB, listener string) CurlAnswer {
	t.Helper()
	u := c.URL
	if listener != "" {
		_, path, _ := strings.Cut(strings.TrimPrefix(u, "http://"), "/")
		u = "http://" + listener + "/" + path
	}
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.Line, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return CurlAnswer{Status: resp.StatusCode, Body: string(b), Decision: resp.Header.Get("X-Hashlb-Decision"), Header: resp.Header}
}

// DemoScript is a demo command (./build.sh envoy, ./build.sh istio's
// program) and what its run must show.
type DemoScript struct {
	Name    string        // how messages name it: "./build.sh envoy"
	Cmd     *exec.Cmd     // not started; it runs in a process group of its own
	Ready   time.Duration // a ceiling for its "try: " line: only catches a hung start
	Stop    time.Duration // a ceiling for its exit after SIGINT: only catches a hung stop
	Stopped string        // the line it prints once it stopped everything
	Addrs   []string      // the addresses it listens on, none of which may accept connections after the stop
}

// RunDemo starts d.Cmd, waits for its "try: " line, which must be the
// README's first curl line, sends the README's curl lines and compares each
// answer with the README's text exactly; then it sends SIGINT to the
// command's process group, as Ctrl-C in a terminal does: the command must
// exit with status 130, leave no process of its group, say d.Stopped, and
// leave none of d.Addrs accepting connections.
func RunDemo(t *testing.T, d DemoScript) {
	t.Helper()
	lines := ReadmeCurls(t)
	start := time.Now()
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d.Cmd.Stdout, d.Cmd.Stderr = pw, pw
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	pgid := d.Cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- d.Cmd.Wait() }()
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	var mu sync.Mutex
	var output strings.Builder
	tryLine := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			output.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if s, ok := strings.CutPrefix(sc.Text(), "try: "); ok {
				tryLine <- s
			}
		}
	}()
	out := func() string { mu.Lock(); defer mu.Unlock(); return output.String() }
	var try string
	select {
	case try = <-tryLine:
	case err := <-exited:
		t.Fatalf("%s exited (%v) before it printed a line to try:\n%s", d.Name, err, out())
	case <-time.After(d.Ready):
		t.Fatalf("%s printed no line to try within %v:\n%s", d.Name, d.Ready, out())
	}
	t.Logf("%s ready after %v", d.Name, time.Since(start).Round(100*time.Millisecond))
	if try != lines[0].Line {
		t.Errorf("%s says to try %q, the README's first line is %q", d.Name, try, lines[0].Line)
	}
	for _, c := range lines {
		a := c.Send(t, "")
		if a.Status != 200 || a.Body != c.Body+"\n" {
			t.Errorf("%s: %d %q, the README says %q", c.Line, a.Status, a.Body, c.Body)
		}
		if c.Decision != "" && a.Decision != c.Decision {
			t.Errorf("%s: X-Hashlb-Decision %q, the README says %q", c.Line, a.Decision, c.Decision)
		}
	}
	// Ctrl-C: the terminal sends SIGINT to the foreground process group.
	stopAt := time.Now()
	syscall.Kill(-pgid, syscall.SIGINT)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("after Ctrl-C %s exited with %v, want status 130", d.Name, err)
		}
	case <-time.After(d.Stop):
		t.Fatalf("%s still runs %v after Ctrl-C:\n%s", d.Name, d.Stop, out())
	}
	t.Logf("stopped %v after Ctrl-C", time.Since(stopAt).Round(10*time.Millisecond))
	if err := syscall.Kill(-pgid, 0); err != syscall.ESRCH {
		t.Errorf("after %s exited its process group still has processes (kill -0: %v)", d.Name, err)
	}
	for _, a := range d.Addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("after Ctrl-C %s still accepts connections", a)
		}
	}
	if !strings.Contains(out(), d.Stopped) {
		t.Errorf("%s did not say it stopped the demo (%q):\n%s", d.Name, d.Stopped, out())
	}
	if t.Failed() {
		t.Logf("%s printed:\n%s", d.Name, out())
	}
}
