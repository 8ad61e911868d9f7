package envoyrun

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/hashlb/hashlb/internal/deploycheck"
)

// DemoHeader is the first line of the bootstrap DemoBootstrap writes.
const DemoHeader = "# Written by ./build.sh envoy (tools/envoydemo) from envoy.yaml: do not edit.\n"

// demoOpen is the first line of the plugin configuration in envoy.yaml:
// the StringValue's "value: |" and the JSON object's opening brace.
var demoOpen = regexp.MustCompile(`(?m)^( *)value: \|\n( *)\{\n`)

// DemoBootstrap returns the bootstrap ./build.sh envoy runs: envoy.yaml as
// shipped, with one change, "debugHeader": true in its hashlb configuration,
// so that Envoy answers the README's quick-start requests as the embedded
// demo (hashlb-proxy with configs/demo.json) does, the response header
// x-hashlb-decision included. Everything else (the listener, the filter
// chain, the override_host cluster, upstreamCount 3 with two retries,
// x-client-id persistence, the ports) is envoy.yaml's: configs/demo.json's
// upstreamCount 1 would break envoy.yaml's rule that num_retries stays below
// upstreamCount, and on requests without x-client-id persistence decides
// nothing. The result must hold exactly one hashlb configuration, with
// debugHeader on, and pass hashlb check's cross-checks.
func DemoBootstrap(envoyYAML []byte) ([]byte, error) {
	locs := demoOpen.FindAllSubmatchIndex(envoyYAML, -1)
	if len(locs) != 1 {
		return nil, fmt.Errorf("envoy.yaml: want one hashlb configuration (a \"value: |\" line, then \"{\"), found %d", len(locs))
	}
	brace := string(envoyYAML[locs[0][4]:locs[0][5]])
	var out bytes.Buffer
	out.WriteString(DemoHeader)
	out.WriteString("# The one change: \"debugHeader\": true, so answers carry x-hashlb-decision as ./build.sh run's do.\n")
	out.Write(envoyYAML[:locs[0][1]])
	out.WriteString(brace + `  "debugHeader": true,` + "\n")
	out.Write(envoyYAML[locs[0][1]:])
	f, err := deploycheck.Scan(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("the demo bootstrap: %v", err)
	}
	items := f.Configs()
	if len(items) != 1 {
		return nil, fmt.Errorf("the demo bootstrap: %d hashlb configurations, want 1", len(items))
	}
	cfg, problems := items[0].Parse()
	if problems != nil {
		return nil, fmt.Errorf("the demo bootstrap: %s", strings.Join(problems, "; "))
	}
	if !cfg.DebugHeader {
		return nil, errors.New("the demo bootstrap: debugHeader is not on")
	}
	var bad []string
	for _, fd := range deploycheck.Check([]deploycheck.Named{{Name: "envoy-demo.yaml", File: f}}) {
		if !fd.Warning {
			bad = append(bad, fd.String())
		}
	}
	if bad != nil {
		return nil, fmt.Errorf("the demo bootstrap: %s", strings.Join(bad, "; "))
	}
	return out.Bytes(), nil
}
