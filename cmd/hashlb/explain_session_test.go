package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// sessionValue signs a session for service name of testdata/explain/
// session.json (or of config js) issued and last used at t, with the
// testdata key.
func sessionValue(t *testing.T, js []byte, name string, at time.Time) string {
	t.Helper()
	key, err := os.ReadFile("testdata/explain/session.key")
	if err != nil {
		t.Fatal(err)
	}
	c, err := lbcore.ParseConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	b := lbcore.NewBalancer(c, 0)
	if err := b.EnableSession([]byte(strings.TrimSuffix(string(key), "\n")), ""); err != nil {
		t.Fatal(err)
	}
	// A request whose URL ranks name first.
	for i := range 1000 {
		r := lbcore.Request{Target: "/p/" + strings.Repeat("x", i)}
		if d := b.Decide(&r, at); c.Services[d.At(0)].Name == name {
			return string(b.AppendSessionValue(nil, &d, at))
		}
	}
	t.Fatalf("no URL ranks %s first", name)
	return ""
}

// TestExplainSessionGolden: the report of a request's session: valid (the
// response sets nothing), due for the idle refresh, idle, expired, forged,
// naming a DOWN service, signed a day ahead of the clock, naming a service
// the configuration does not have,
// without a session (the response starts one), and without the key.
func TestExplainSessionGolden(t *testing.T) {
	t.Setenv(lbcore.SessionKeyEnv, "")
	const td = "testdata/explain/"
	js, err := os.ReadFile(td + "session.json")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	gone := []byte(strings.Replace(string(js), `{"name": "b1", "address": "10.0.0.11:8080"},`, `{"name": "b1", "address": "10.0.0.11:8080"}, {"name": "b9", "address": "10.0.0.19:8080"},`, 1))
	valid := sessionValue(t, js, "b2", at.Add(-time.Minute))
	forged := valid[:10] + map[bool]string{true: "B", false: "A"}[valid[10] == 'A'] + valid[11:]
	base := []string{td + "session.json", "-url", "/cart", "-at", at.Format(time.RFC3339), "-session-key-file", td + "session.key"}
	cookie := func(v string) []string { return []string{"-header", "cookie: theme=dark; shop-session=" + v} }
	tests := []struct {
		name string
		args []string
	}{
		{"session-valid", append(cookie(valid), base...)},
		{"session-refresh", append(cookie(sessionValue(t, js, "b3", at.Add(-10*time.Minute))), base...)},
		{"session-idle", append(cookie(sessionValue(t, js, "b2", at.Add(-40*time.Minute))), base...)},
		{"session-expired", append(cookie(sessionValue(t, js, "b2", at.Add(-25*time.Hour))), base...)},
		{"session-forged", append(cookie(forged), base...)},
		{"session-down", append(append(cookie(valid), base...), "-down", "b2")},
		{"session-future", append(cookie(sessionValue(t, js, "b2", at.Add(24*time.Hour))), base...)},
		{"session-gone", append(cookie(sessionValue(t, gone, "b9", at.Add(-time.Minute))), base...)},
		{"session-none", base},
		{"session-no-key", append(cookie(valid), base[:5]...)},
		{"session-json", append(append(cookie(valid), base...), "-json")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runGolden(t, "explain", tt.name, append([]string{"explain"}, tt.args...))
		})
	}
}
