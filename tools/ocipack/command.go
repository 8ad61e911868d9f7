package ocipack

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Command is a packer's command line (hashlb-oci, hashlb-controller-image):
// the flags -in, -out and -tag, the file -in names read whole, and
// SOURCE_DATE_EPOCH as the image's time.
type Command struct {
	// Name begins the message of an error.
	Name string
	// In, Out and Tag are the flags' defaults; InUsage and TagUsage say
	// what -in and -tag name (-out is always the layout's directory).
	In, InUsage, Out, Tag, TagUsage string
	// Pack writes data, the file in, as the layout out tagged tag and
	// stamped created, and prints what it wrote.
	Pack func(ctx context.Context, data []byte, in, out, tag string, created time.Time) error
}

// Main parses the flags and packs; on an error it prints it after c.Name
// and exits with status 1.
func (c Command) Main() {
	in := flag.String("in", c.In, c.InUsage)
	out := flag.String("out", c.Out, "directory of the OCI image layout to write")
	tag := flag.String("tag", c.Tag, c.TagUsage)
	flag.Parse()
	if err := c.run(*in, *out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, c.Name+":", err)
		os.Exit(1)
	}
}

func (c Command) run(in, out, tag string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var created time.Time
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %v", s, err)
		}
		created = time.Unix(sec, 0)
	}
	return c.Pack(context.Background(), data, in, out, tag, created)
}
