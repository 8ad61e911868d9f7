// Package services turns a Kubernetes Service's EndpointSlices into hashlb's
// services list. It is pure: no client, no clock. The controller feeds it
// what its informers hold; tests and other tools can feed it any slices.
package services

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The annotations of a WasmPlugin that the controller reads.
const (
	// AnnotationService names the Service, in the WasmPlugin's namespace,
	// whose endpoints become the services.
	AnnotationService = "hashlb.io/service"
	// AnnotationPort names the Service port by name or number; needed only
	// when the Service has more than one port.
	AnnotationPort = "hashlb.io/port"
	// AnnotationAddressType is IPv4 (default) or IPv6: the address family
	// whose EndpointSlices are used.
	AnnotationAddressType = "hashlb.io/address-type"
)

// Service is one entry of hashlb's services, as the controller writes it.
type Service struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	HashID  string `json:"hashId,omitempty"`
	Enabled bool   `json:"enabled"`
}

// Selection is what a WasmPlugin's annotations select.
type Selection struct {
	// Service is the Service's name (hashlb.io/service).
	Service string
	// Port is the hashlb.io/port annotation, "" when absent.
	Port string
	// AddressType is discoveryv1.AddressTypeIPv4 or AddressTypeIPv6.
	AddressType discoveryv1.AddressType
}

// ParseAnnotations reads a WasmPlugin's annotations. ok is false when the
// object has no hashlb.io/service annotation (the controller leaves it alone).
func ParseAnnotations(ann map[string]string) (sel Selection, ok bool, err error) {
	sel.Service = strings.TrimSpace(ann[AnnotationService])
	if sel.Service == "" {
		return sel, false, nil
	}
	sel.Port = strings.TrimSpace(ann[AnnotationPort])
	switch t := strings.TrimSpace(ann[AnnotationAddressType]); strings.ToLower(t) {
	case "", "ipv4":
		sel.AddressType = discoveryv1.AddressTypeIPv4
	case "ipv6":
		sel.AddressType = discoveryv1.AddressTypeIPv6
	default:
		return sel, true, fmt.Errorf("%s: %q is not IPv4 or IPv6", AnnotationAddressType, t)
	}
	return sel, true, nil
}

// ResolvePort returns the name of the Service port that want (a port name
// or number, "" for the only port) selects. EndpointSlices name their ports
// after the Service's, so the name is what FromSlices matches.
func ResolvePort(svc *corev1.Service, want string) (string, error) {
	ports := svc.Spec.Ports
	if len(ports) == 0 {
		return "", fmt.Errorf("Service %s/%s has no ports", svc.Namespace, svc.Name)
	}
	if want == "" {
		if len(ports) > 1 {
			return "", fmt.Errorf("Service %s/%s has %d ports (%s): set %s to one of them",
				svc.Namespace, svc.Name, len(ports), portList(ports), AnnotationPort)
		}
		return ports[0].Name, nil
	}
	n, numErr := strconv.Atoi(want)
	for _, p := range ports {
		if p.Name == want || (numErr == nil && int(p.Port) == n) {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("%s: Service %s/%s has no port %q (ports: %s)",
		AnnotationPort, svc.Namespace, svc.Name, want, portList(ports))
}

func portList(ports []corev1.ServicePort) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p.Port))
		if p.Name != "" {
			s[i] = p.Name + "=" + s[i]
		}
	}
	return strings.Join(s, ", ")
}

// FromSlices returns one service per endpoint of the slices that carries
// port portName and belongs to family, sorted by name (then address).
//
//   - name: the endpoint's targetRef name (the pod), else its hostname, else
//     its IP (an IPv6 address with '-' for ':', since a name is an HTTP token);
//   - address: ip:port, [ip]:port for IPv6, the port being the slice's port
//     of that name (the pod's target port);
//   - hashId: the pod's name when there is a targetRef, so a pod rescheduled
//     with a new IP keeps its keys;
//   - enabled: false when the endpoint is not ready or is terminating.
//
// An endpoint uses its first address only: Kubernetes defines no meaning for
// the others and its EndpointSlice controller writes exactly one. The same
// endpoint listed in two slices (as during the EndpointSlice controller's
// moves) gives one service, enabled if either copy is.
func FromSlices(epSlices []discoveryv1.EndpointSlice, portName string, family discoveryv1.AddressType) []Service {
	var out []Service
	for i := range epSlices {
		es := &epSlices[i]
		if es.AddressType != family {
			continue
		}
		port, ok := slicePort(es, portName)
		if !ok {
			continue
		}
		for _, ep := range es.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			ip, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil || (family == discoveryv1.AddressTypeIPv4) != ip.Is4() {
				continue
			}
			s := Service{Address: netip.AddrPortFrom(ip, port).String(), Enabled: enabled(ep.Conditions)}
			switch {
			case ep.TargetRef != nil && ep.TargetRef.Name != "":
				s.Name, s.HashID = ep.TargetRef.Name, ep.TargetRef.Name
			case ep.Hostname != nil && *ep.Hostname != "":
				s.Name = *ep.Hostname
			default:
				s.Name = strings.ReplaceAll(ip.String(), ":", "-")
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Service) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Address, b.Address),
			strings.Compare(a.HashID, b.HashID))
	})
	// Merge copies of one endpoint; a name with two addresses stays twice,
	// for lbcore to refuse.
	merged := out[:0]
	for _, s := range out {
		if n := len(merged); n > 0 && merged[n-1].Name == s.Name && merged[n-1].Address == s.Address && merged[n-1].HashID == s.HashID {
			merged[n-1].Enabled = merged[n-1].Enabled || s.Enabled
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// slicePort returns the port number named portName in the slice.
func slicePort(es *discoveryv1.EndpointSlice, portName string) (uint16, bool) {
	for _, p := range es.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name == portName && p.Port != nil && *p.Port > 0 && *p.Port <= 65535 {
			return uint16(*p.Port), true
		}
	}
	return 0, false
}

// enabled reads an endpoint's conditions. A nil ready means unknown, which
// the API says to read as ready; a terminating endpoint is never enabled.
func enabled(c discoveryv1.EndpointConditions) bool {
	if c.Terminating != nil && *c.Terminating {
		return false
	}
	return c.Ready == nil || *c.Ready
}

// JSON is the services as a JSON array, the same bytes for the same set.
func JSON(list []Service) []byte {
	if list == nil {
		list = []Service{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(list) // a []Service of strings and bools always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
