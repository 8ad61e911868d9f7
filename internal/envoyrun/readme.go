package envoyrun

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
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
