package hostile

// Request is one request as a proxy hands it to the module.
type Request struct {
	// Class names what the request attacks, for example "jwt-deep-array".
	Class string `json:"class"`
	// Headers are the request headers in order, pseudo-headers (:method,
	// :scheme, :authority, :path) first. A name may repeat: hosts that keep
	// header lines apart show the module every copy.
	Headers [][2]string `json:"headers"`
	// Source and Dest are the source.address and destination.address
	// properties; "" means the host does not have the property.
	Source string `json:"source"`
	Dest   string `json:"dest"`
}

// Requests returns the hostile corpus: every class, several requests each.
func Requests() []Request {
	var rs []Request
	for _, c := range classes {
		rs = append(rs, c.make()...)
	}
	return rs
}

// Classes returns the class names of the hostile corpus, in corpus order.
func Classes() []string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.name
	}
	return names
}

type class struct {
	name string
	make func() []Request
}

// classes is filled in classes.go.
var classes []class
