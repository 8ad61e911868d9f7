package envoyrun

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Reply is an HTTP/1.1 answer read off the wire: the status, headers and
// whole body, and the client's own address on the connection (the source
// address and port the listener accepted).
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	Local  string
}

// Exchange sends raw, one HTTP/1.1 request written byte for byte, on a new
// connection from loopback address srcIP to dst, and reads the answer to
// method (a HEAD's has no body); the dial and the whole exchange must end
// within timeout.
func Exchange(srcIP, dst string, raw []byte, method string, timeout time.Duration) (Reply, error) {
	var r Reply
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcIP)}, Timeout: timeout}
	c, err := d.Dial("tcp", dst)
	if err != nil {
		return r, err
	}
	defer c.Close()
	r.Local = c.LocalAddr().String()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(raw); err != nil {
		return r, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		return r, fmt.Errorf("reading the answer: %w", err)
	}
	r.Body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return r, fmt.Errorf("reading the body: %w", err)
	}
	r.Status, r.Header = resp.StatusCode, resp.Header
	return r, nil
}
