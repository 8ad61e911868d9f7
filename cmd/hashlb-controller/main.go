// Command hashlb-controller keeps the services of every Istio WasmPlugin and
// TrafficExtension annotated hashlb.io/service equal to that Service's endpoints
// (docs/controller.md).
//
//	hashlb-controller [-kubeconfig FILE] [-leader-elect] [-ecds-dir DIR] ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/controller"
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hashlb-controller:", err)
		os.Exit(1)
	}
}

// config is what the command line sets.
type config struct {
	opts       controller.Options
	kubeconfig string
	zap        zap.Options
}

// parseFlags reads the command line.
func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("hashlb-controller", flag.ContinueOnError)
	c := &config{}
	o := &c.opts
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig `FILE` (default $KUBECONFIG, else the in-cluster configuration)")
	fs.DurationVar(&o.Debounce, "debounce", time.Second, "shortest time between two writes of one WasmPlugin's services")
	fs.StringVar(&o.Namespace, "namespace", "", "watch only this namespace (default all)")
	fs.StringVar(&o.ECDSDir, "ecds-dir", "", "also write each annotated WasmPlugin as an Envoy ECDS file in `DIR` (<namespace>_<name>.json)")
	fs.StringVar(&o.ECDSModule, "ecds-module", "dist/hashlb.wasm", "Wasm `FILE` the ECDS files load when the WasmPlugin's url is not file://")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Prometheus metrics listen `address` (0 turns it off)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "/healthz and /readyz listen `address` (0 turns it off)")
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "reconcile only while holding the leader-election Lease (run several replicas)")
	fs.StringVar(&o.LeaderElectionID, "leader-elect-id", controller.Name, "name of the leader-election Lease")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-elect-namespace", "", "namespace of the Lease (default: the pod's namespace)")
	kinds := fs.String("kinds", "", "comma-separated kinds to keep in step, of WasmPlugin and TrafficExtension (default: each one the API server serves)")
	c.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *kinds != "" {
		for _, name := range strings.Split(*kinds, ",") {
			k := controller.KindByName(strings.TrimSpace(name))
			if k == nil {
				return nil, fmt.Errorf("-kinds: %q is not WasmPlugin or TrafficExtension", name)
			}
			o.Kinds = append(o.Kinds, k)
		}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, nil
}

// run runs the controller until ctx ends.
func run(ctx context.Context, args []string) error {
	c, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	o := c.opts
	o.Logger = zap.New(zap.UseFlagOptions(&c.zap))
	ctrl.SetLogger(o.Logger)
	cfg, err := restConfig(c.kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := controller.NewManager(cfg, o)
	if err != nil {
		return err
	}
	o.Logger.Info("starting", "leaderElection", o.LeaderElection, "namespace", o.Namespace, "ecdsDir", o.ECDSDir, "debounce", o.Debounce.String())
	return mgr.Start(ctx)
}

// restConfig loads -kubeconfig, else $KUBECONFIG, else the in-cluster
// configuration.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no -kubeconfig and not in a cluster: %w", err)
	}
	return cfg, nil
}
