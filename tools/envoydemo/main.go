package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

func main() {
	in := flag.String("in", "envoy.yaml", "the bootstrap to start from")
	out := flag.String("o", "", "where to write the demo bootstrap (default: standard output)")
	flag.Parse()
	src, err := os.ReadFile(*in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoydemo: %v\n", err)
		os.Exit(1)
	}
	b, err := envoyrun.DemoBootstrap(src)
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoydemo: %s: %v\n", *in, err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(b)
	} else {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoydemo: %v\n", err)
		os.Exit(1)
	}
}
