package collector

import (
	"context"

	"github.com/tidemark/tidemark/latency"
)

// appendLeaders answers whose clock stamped a record's LogAppendTime: the broker that led the record's partition
// leader epoch, which across a failover is not the partition's leader when the record is read (internal/kafka's
// AppendLeaders satisfies it). -1 means it cannot be known.
type appendLeaders interface {
	// AppendLeader waits, at most one refresh round, for offset to be placed (the tap and probe paths).
	AppendLeader(ctx context.Context, topic string, partition int32, offset int64) int32
	// Placed answers without waiting: -1 when offset is not placed yet.
	Placed(topic string, partition int32, offset int64) int32
	// Await returns nil when Placed can answer now, else a channel closed once a round begun after the call ended
	// (the receipts path parks the record on it instead of waiting on its record path).
	Await(topic string, partition int32, offset int64) <-chan struct{}
}

// appendHost returns the engine host and the broker_host name of the clock that stamped offset's LogAppendTime, and
// the broker id: the leader of its epoch. When that cannot be known the stamp's host is latency.UnknownHost (the
// engine flags its stages and never estimates or blames it) and the name is "", never the current leader's.
func (d *pathDeps) appendHost(ctx context.Context, topic string, partition int32, offset int64) (latency.HostID, string, int32) {
	leader := int32(-1)
	if d.appends != nil {
		leader = d.appends.AppendLeader(ctx, topic, partition, offset)
	}
	return d.leaderHost(leader)
}

func (d *pathDeps) leaderHost(leader int32) (latency.HostID, string, int32) {
	if leader < 0 {
		d.metrics.AppendLeaderUnknown.Inc()
		return latency.UnknownHost, "", -1
	}
	name := brokerHost(leader)
	return d.hosts.id(name), name, leader
}
