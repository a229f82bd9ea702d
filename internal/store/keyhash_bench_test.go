package store

import (
	"hash/maphash"
	"testing"
)

// BenchmarkLatencyKeyHash is the writer's dedup key of one latency row, for rows of one Write that share cluster,
// topic and group (the receipts path's shape).
//
//	go test ./internal/store -run '^$' -bench LatencyKeyHash
func BenchmarkLatencyKeyHash(b *testing.B) {
	var k keyHasher
	seed := maphash.MakeSeed()
	r := LatencyRow{Cluster: "local", Group: "bench-app", Topic: "orders", Partition: 3, Class: ClassLive}
	var sum uint64
	for b.Loop() {
		r.Offset++
		sum += k.latency(seed, &r)
	}
	_ = sum
}
