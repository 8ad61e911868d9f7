package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GatewayAPIModule is the Go module whose CRDs are installed: the controller
// module requires it (for its typed HTTPRoute), and its module zip carries
// the CRD manifests under config/crd/.
const GatewayAPIModule = "sigs.k8s.io/gateway-api"

// GatewayAPIDir returns the module cache directory of the Gateway API
// version the controller module requires (downloading it when the cache
// does not have it yet).
func GatewayAPIDir(root string) (string, error) {
	dir, err := goCmd(root, "list", "-m", "-f", "{{.Dir}}", GatewayAPIModule)
	if err == nil && dir != "" {
		return dir, nil
	}
	// Not extracted yet: go mod download fills the module cache.
	if _, err := goCmd(root, "mod", "download", GatewayAPIModule); err != nil {
		return "", err
	}
	dir, err = goCmd(root, "list", "-m", "-f", "{{.Dir}}", GatewayAPIModule)
	if err != nil {
		return "", err
	}
	if dir == "" {
		return "", fmt.Errorf("testenv: go list gives no directory for %s", GatewayAPIModule)
	}
	return dir, nil
}

// GatewayAPICRDs returns the CRD files of channel ("standard" or
// "experimental") that the controller's tests install: HTTPRoute and
// ReferenceGrant.
func GatewayAPICRDs(root, channel string) ([]string, error) {
	dir, err := GatewayAPIDir(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kind := range []string{"httproutes", "referencegrants"} {
		f := filepath.Join(dir, "config", "crd", channel, "gateway.networking.k8s.io_"+kind+".yaml")
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("testenv: the Gateway API module has no %s CRD: %w", kind, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// goCmd runs the go command in the controller module and returns its
// trimmed output.
func goCmd(root string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testenv: go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(out.String()), nil
}
