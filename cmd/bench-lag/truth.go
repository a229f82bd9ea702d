package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// gpKey names one group-partition.
type gpKey struct {
	group, topic string
	partition    int32
}

// truthRow is one row of Kafka's consumer-groups command: the committed offset and the log end offset it read.
type truthRow struct {
	current, end, lag int64
}

// truth is one run of Apache Kafka's consumer-groups command (--describe --all-groups) during a window: its rows for
// the bench's groups, and when it ran (its answers were read somewhere in [start, end]).
type truth struct {
	rows       map[gpKey]truthRow
	start, end time.Time
}

// parseConsumerGroups reads the output of `kafka-consumer-groups --describe` (one table per group, a header line
// naming the columns GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...) and returns the rows of the groups
// starting with prefix that have a committed offset. Columns are found by the header's names, so a column Kafka adds
// does not shift them. It fails when no header was found.
func parseConsumerGroups(out []byte, prefix string) (map[gpKey]truthRow, error) {
	rows := map[gpKey]truthRow{}
	col := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "GROUP" {
			clear(col)
			for i, name := range f {
				col[name] = i
			}
			continue
		}
		if len(col) == 0 || len(f) < len(col)-3 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		get := func(name string) (string, bool) {
			i, ok := col[name]
			if !ok || i >= len(f) {
				return "", false
			}
			return f[i], true
		}
		t, ok1 := get("TOPIC")
		ps, ok2 := get("PARTITION")
		cur, ok3 := get("CURRENT-OFFSET")
		end, ok4 := get("LOG-END-OFFSET")
		lag, ok5 := get("LAG")
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || cur == "-" || lag == "-" {
			continue
		}
		p, err1 := strconv.ParseInt(ps, 10, 32)
		c, err2 := strconv.ParseInt(cur, 10, 64)
		e, err3 := strconv.ParseInt(end, 10, 64)
		l, err4 := strconv.ParseInt(lag, 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("consumer-groups row %q: %w", sc.Text(), err)
		}
		rows[gpKey{f[0], t, int32(p)}] = truthRow{current: c, end: e, lag: l}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(col) == 0 {
		return nil, fmt.Errorf("consumer-groups output has no header line: %.200q", out)
	}
	return rows, nil
}

// describeGroups runs Kafka's consumer-groups command (from the Kafka jars in lib) against the cluster.
func describeGroups(ctx context.Context, lib, bootstrap, prefix string) (*truth, error) {
	t := &truth{start: time.Now()}
	cmd := exec.CommandContext(ctx, "java", "-Xmx512m", "-cp", lib+"/*",
		"org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bootstrap, "--describe", "--all-groups")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.end = time.Now()
	if err != nil {
		return nil, fmt.Errorf("kafka consumer-groups --describe: %w: %s", err, tail(stderr.Bytes(), 500))
	}
	if t.rows, err = parseConsumerGroups(out, prefix); err != nil {
		return nil, err
	}
	return t, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// exported is what one exporter's scrape says of one group-partition: its offset lag and, for the exporters that
// export one, its time lag in seconds (NaN when absent).
type exported struct {
	lag     float64
	seconds float64
}

// check is the comparison of one scrape with one truth.
type check struct {
	Rows          int     `json:"rows_compared"`
	Missing       int     `json:"rows_missing"` // group-partitions in the truth the scrape had no lag series for
	LagErrors     int     `json:"lag_errors"`   // rows off by more than the tolerance
	LagAbsErrP50  float64 `json:"lag_abs_err_p50"`
	LagAbsErrMax  float64 `json:"lag_abs_err_max"`
	LagTolerance  float64 `json:"lag_tolerance_records"`
	TimeRows      int     `json:"time_lag_rows_compared"` // 0 for an exporter without a time-lag series
	TimeErrors    int     `json:"time_lag_errors"`
	TimeAbsErrP50 float64 `json:"time_lag_abs_err_p50_s"`
	TimeAbsErrMax float64 `json:"time_lag_abs_err_max_s"`
	TimeTolerance float64 `json:"time_lag_tolerance_s"`
}

// tolerance is how far a correct exporter's figure may be from the truth: what the live workload can move in the
// time between the two readings. delta is the longest time between the moment an exporter may have read Kafka for its
// scrape (up to one poll interval before it) and the moment the consumer-groups command read it; the producer writes
// rate records per second to each partition and a moving group commits every commitEvery. Offset lag = end −
// committed: the end moves rate×delta, the committed offset at most rate×(delta + commitEvery) (a commit jumps to
// the end), so lag tolerance = rate×(2·delta + commitEvery) + 1. Time lag = now − timestamp(committed record): now
// moves delta, the committed record's timestamp at most delta + commitEvery, so time-lag tolerance = 2·delta +
// commitEvery + 1 s (records carry millisecond timestamps, scrapes whole seconds at most).
func tolerance(delta time.Duration, rate float64, commitEvery time.Duration) (lagTol, timeTol float64) {
	d, c := delta.Seconds(), commitEvery.Seconds()
	return math.Ceil(rate*(2*d+c)) + 1, 2*d + c + 1
}

// compare judges a scrape taken at scrapeAt against the truth: every truth row must have a lag series within
// lagTol records; where the exporter exports time lag, it must be within timeTol seconds of the truth's time lag,
// computed as the truth's mid-time minus the timestamp of the record at the committed offset (recordTS, from the
// producer's acknowledged writes; 0 when the group has consumed everything).
func compare(tr *truth, got map[gpKey]exported, hasTime bool, lagTol, timeTol float64,
	recordTS func(topic string, partition int32, offset int64) (time.Time, bool)) check {
	c := check{LagTolerance: lagTol}
	if hasTime {
		c.TimeTolerance = timeTol
	}
	mid := tr.start.Add(tr.end.Sub(tr.start) / 2)
	var lagErrs, timeErrs []float64
	for k, row := range tr.rows {
		c.Rows++
		g, ok := got[k]
		if !ok || math.IsNaN(g.lag) {
			c.Missing++
			continue
		}
		e := math.Abs(g.lag - float64(row.lag))
		lagErrs = append(lagErrs, e)
		if e > lagTol {
			c.LagErrors++
		}
		if !hasTime {
			continue
		}
		want := 0.0
		if row.current < row.end {
			ts, ok := recordTS(k.topic, k.partition, row.current)
			if !ok {
				continue // a record the bench did not write: not judged
			}
			want = mid.Sub(ts).Seconds()
		}
		c.TimeRows++
		if math.IsNaN(g.seconds) {
			c.TimeErrors++
			continue
		}
		e = math.Abs(g.seconds - want)
		timeErrs = append(timeErrs, e)
		if e > timeTol {
			c.TimeErrors++
		}
	}
	c.LagAbsErrP50, c.LagAbsErrMax = pmax(lagErrs)
	c.TimeAbsErrP50, c.TimeAbsErrMax = pmax(timeErrs)
	return c
}

func pmax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	return p50(xs), slices.Max(xs)
}
