package lbcore

import (
	"fmt"
	"strings"
	"testing"
)

// podPoolConfig is a controller-shaped configuration of n services (name =
// hashId = pod, sorted), pod moved to a new address: what a plugin
// configuration looks like after one pod was rescheduled.
func podPoolConfig(n, moved int) []byte {
	var b strings.Builder
	b.WriteString(`{"lbMethod":"URLHASH","debugHeader":true,"hashLength":` + fmt.Sprint(moved%4096+1) + `,"services":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		ip := fmt.Sprintf("10.%d.%d.%d", 1+i/65536, i/256%256, i%256)
		if i == moved {
			ip = fmt.Sprintf("10.200.%d.%d", moved/256%256, moved%256)
		}
		fmt.Fprintf(&b, `{"name":"web-%05d","hashId":"web-%05d","address":"%s:8080"}`, i, i, ip)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkConfigure is the lbcore part of a new plugin configuration of
// 10^4 services: ParseConfig, NewBalancer and carryOver from the previous
// one (filter/plugin.go start).
//
//	go test ./lbcore -run '^$' -bench BenchmarkConfigure -benchmem
func BenchmarkConfigure(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		prev, err := ParseConfig(podPoolConfig(n, 0))
		if err != nil {
			b.Fatal(err)
		}
		data := podPoolConfig(n, 1)
		b.Run(fmt.Sprintf("services=%d/parse", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseConfig(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		c, _ := ParseConfig(data)
		b.Run(fmt.Sprintf("services=%d/balancer", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				NewBalancer(c, 1)
			}
		})
		b.Run(fmt.Sprintf("services=%d/carry", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				carryOver(prev.Services, c.Services)
			}
		})
	}
}
