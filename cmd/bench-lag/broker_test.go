package main

import "testing"

func TestParseRequestCounts(t *testing.T) {
	// JmxTool --report-format properties: a time stamp, then one key=value per object and attribute
	out := []byte(`time=1733389200000
kafka.network:type=RequestMetrics,name=RequestsPerSec,request=OffsetFetch,version=8:Count=40
kafka.network:type=RequestMetrics,name=RequestsPerSec,request=OffsetFetch,version=9:Count=2
kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Fetch,version=17:Count=7
`)
	got, err := parseRequestCounts(out)
	if err != nil {
		t.Fatal(err)
	}
	// versions summed per request type; the time stamp is not a count
	if len(got) != 2 || got["OffsetFetch"] != 42 || got["Fetch"] != 7 {
		t.Fatalf("got %v, want OffsetFetch 42, Fetch 7", got)
	}
	if _, err := parseRequestCounts([]byte("time=1\n")); err == nil {
		t.Fatal("output without counts must be an error, not zero requests")
	}
}
