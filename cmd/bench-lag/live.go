package main

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/kafka"
)

// groupClass is how a bench group behaves in the live workload, by its index: 7 in 10 keep up (commit within a
// few records of the end after every move), 2 in 10 lag (their commits advance half as fast as the end, so their
// lag grows), 1 in 10 stopped (never commit again). Every group's first unconsumed record changes from cycle to
// cycle unless it is stopped, so time lag needs fresh record reads every cycle.
type groupClass int

const (
	keepsUp groupClass = iota
	lags
	stopped
)

func classOf(g int) groupClass {
	switch g % 10 {
	case 7, 8:
		return lags
	case 9:
		return stopped
	}
	return keepsUp
}

// mover is the live workload: every `every` it produces `records` records to every partition of every bench topic,
// then commits every keeping-up and lagging group's offsets for the new end (groupClass). It runs from before the
// exporter starts to the end of the window.
type mover struct {
	every   time.Duration
	records int
	topics  int
	groups  int
	parts   int
	initial int                  // records per partition before the first move
	base    func(g, p int) int64 // a group's committed offset before the first move
	topic   func(t int) string   //
	group   func(g int) string   //
	adm     *kafka.Admin         //
	reader  *kafka.ClusterReader //
	moves   atomic.Int64         // moves completed
	errs    atomic.Int64         // failed produce or commit calls
	logf    func(string, ...any) //
	all     []int32              //
}

// committed is group g's committed offset on partition p after move n (end is the partition's end offset then).
func (m *mover) committed(g, p int, n int64, end int64) (int64, bool) {
	switch classOf(g) {
	case keepsUp:
		return end - int64((g+p)%3), true
	case lags:
		return min(end, m.base(g, p)+n*int64(m.records)/2), true
	}
	return 0, false
}

// run moves until ctx ends.
func (m *mover) run(ctx context.Context) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for tp := range m.topics {
			if err := m.adm.Produce(m.topic(tp), m.all, m.records); err != nil {
				m.errs.Add(1)
				m.logf("live workload: %v", err)
			}
		}
		n := m.moves.Load() + 1
		end := int64(m.initial) + n*int64(m.records)
		err := forEach(m.groups, 8, func(g int) error {
			offs := map[int32]int64{}
			for p := range m.parts {
				if c, ok := m.committed(g, p, n, end); ok {
					offs[int32(p)] = c
				}
			}
			if len(offs) == 0 || ctx.Err() != nil {
				return nil
			}
			return m.reader.CommitOffsets(ctx, m.group(g), map[string]map[int32]int64{m.topic(g % m.topics): offs})
		})
		if err != nil && ctx.Err() == nil {
			m.errs.Add(1)
			m.logf("live workload commits: %v", err)
		}
		m.moves.Store(n)
	}
}

// liveCheck compares, until deadline, the daemon's exported lag of the check groups with Kafka's consumer-groups
// command run just before and just after a snapshot whose reads began after the first command returned
// (benchproc.LiveLagMismatches: offsets only grow, so the snapshot must lie between the two readings).
type liveCheck struct {
	url, cluster, prefix, lib string
	brokers, groups           []string
	checks, compared, mism    int
	logf                      func(string, ...any)
}

func (c *liveCheck) run(ctx context.Context, deadline time.Time) error {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		out, err := benchproc.DescribeGroups(ctx, c.lib, c.brokers, c.groups...)
		if err != nil {
			return err
		}
		beforeAt := time.Now()
		before, err := benchproc.ParseGroupOffsets(strings.NewReader(out), c.prefix)
		if err != nil {
			return err
		}
		var ours map[benchproc.GroupPartition]benchproc.ExportedOffsets
		for ours == nil && time.Now().Before(deadline) {
			f, err := benchproc.Scrape(ctx, c.url)
			if err == nil {
				if from, ok := benchproc.SnapshotReadsFrom(f, c.cluster); ok && !from.Before(beforeAt) {
					ours = benchproc.SnapshotOffsets(f, c.cluster, c.prefix)
					break
				}
			}
			time.Sleep(time.Second)
		}
		if ours == nil {
			return nil // the window ended before a fresh snapshot
		}
		if out, err = benchproc.DescribeGroups(ctx, c.lib, c.brokers, c.groups...); err != nil {
			return err
		}
		after, err := benchproc.ParseGroupOffsets(strings.NewReader(out), c.prefix)
		if err != nil {
			return err
		}
		mism, compared := benchproc.LiveLagMismatches(before, after, ours)
		c.checks++
		c.compared += compared
		c.mism += len(mism)
		c.logf("live lag check: %d group-partitions compared, %d outside Kafka's bracket", compared, len(mism))
		for i, m := range mism {
			if i == 5 {
				break
			}
			c.logf("live lag mismatch: %s", m)
		}
	}
	return nil
}
