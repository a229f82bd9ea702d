package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestRunGroupCommitsOnlyMarkedOffsets is the adapter's at-least-once contract on the real brokers: a group that
// marked offsets below 5 of 10 records and stopped resumes at 5, and a record's Received stamp comes from Now.
func TestRunGroupCommitsOnlyMarkedOffsets(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.CreateTopic(t, "rg", testenv.Topic{Partitions: 1})
	prod, err := NewProducer(brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < 10; i++ {
		if _, err := prod.Send(Message{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	group := testenv.Name(t, "g")
	stamp := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	run := func(handle func(b Batch, mark func(int64), stop func())) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := RunGroup(ctx, GroupConfig{Brokers: brokers, Sarama: testenv.SaramaConfig(t), Group: group, Topics: []string{topic},
			Oldest: true, MaxBatch: 3, MaxWait: 20 * time.Millisecond, Now: func() time.Time { return stamp }},
			func(_ context.Context, b Batch, mark func(int64)) error { handle(b, mark, cancel); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if ctx.Err() == context.DeadlineExceeded {
			t.Fatal("RunGroup did not finish within 60s")
		}
	}
	var seen []int64
	run(func(b Batch, mark func(int64), stop func()) {
		for _, r := range b.Records {
			if !r.Received.Equal(stamp) {
				t.Errorf("Received %v, want the injected clock's %v", r.Received, stamp)
			}
			seen = append(seen, r.Offset)
			if r.Offset == 4 {
				mark(5) // offsets 0..4 are durable
			}
		}
		if len(seen) >= 10 {
			stop() // everything read, only 0..4 marked
		}
	})
	var first int64 = -1
	run(func(b Batch, _ func(int64), stop func()) {
		if first < 0 {
			first = b.Records[0].Offset
		}
		stop()
	})
	if first != 5 {
		t.Fatalf("restarted group began at offset %d, want 5 (the first unmarked)", first)
	}
}

// TestRunGroupCutsBatchesByWeight: with Weight set, a batch is handed over as soon as its records' weights reach
// MaxWeight, well before MaxBatch records or MaxWait; here a record weighs its value's length.
func TestRunGroupCutsBatchesByWeight(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.CreateTopic(t, "rgweight", testenv.Topic{Partitions: 1})
	prod, err := NewProducer(brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// Cumulative weights 3,6 | 3,4,5 | 1,2,7 | 2,4,5: four batches, each cut by weight (the last one too), so that
	// none waits for MaxWait, which is longer than the test may take: no batch may be cut by the clock.
	weights := []int{3, 3, 3, 1, 1, 1, 1, 5, 2, 2, 1}
	for _, w := range weights {
		if _, err := prod.Send(Message{Topic: topic, Partition: 0, Value: []byte(strings.Repeat("x", w))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sizes []int
	read := 0
	err = RunGroup(ctx, GroupConfig{Brokers: brokers, Sarama: testenv.SaramaConfig(t), Group: testenv.Name(t, "g"),
		Topics: []string{topic}, Oldest: true, MaxBatch: 100, MaxWait: time.Hour,
		Weight: func(r *Record) int { return len(r.Value) }, MaxWeight: 5},
		func(_ context.Context, b Batch, _ func(int64)) error {
			sizes = append(sizes, len(b.Records))
			if read += len(b.Records); read == len(weights) {
				cancel()
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(sizes), "[2 3 3 3]"; got != want {
		t.Fatalf("batch sizes %s, want %s (cut where the weights reach 5)", got, want)
	}
}

// TestRunGroupWaitsForKafka is an outage between the caller's connect and the group's own client: RunGroup retries
// creating the group until Kafka answers (here: until a forwarder to the real broker listens on the only bootstrap
// address), then consumes, instead of returning an error that would stop the caller's path for good.
func TestRunGroupWaitsForKafka(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.CreateTopic(t, "rgwait", testenv.Topic{Partitions: 1})
	addr := testenv.FreeAddr(t) // nothing listens there until the forwarder starts

	retrying := make(chan struct{}, 16)
	log := slog.New(logSignal{msg: "consumer group cannot reach Kafka; retrying", ch: retrying})
	got := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	sc := testenv.SaramaConfig(t)
	sc.Metadata.Retry.Max = 0
	go func() {
		done <- RunGroup(ctx, GroupConfig{Brokers: []string{addr}, Sarama: sc, Group: testenv.Name(t, "g"),
			Topics: []string{topic}, Oldest: true, MaxWait: 20 * time.Millisecond, Logger: log},
			func(_ context.Context, b Batch, mark func(int64)) error {
				for _, r := range b.Records {
					select {
					case got <- string(r.Value):
					default:
					}
					mark(r.Offset + 1)
				}
				return nil
			})
	}()
	for i := 0; i < 2; i++ { // two failed attempts: it retries rather than gives up
		select {
		case <-retrying:
		case err := <-done:
			t.Fatalf("RunGroup returned while Kafka was unreachable: %v", err)
		}
	}
	fwd := forwardTo(t, addr, brokers[0])
	defer fwd.Close()
	prod, err := NewProducer(brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.Send(Message{Topic: topic, Partition: 0, Value: []byte("after the outage")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v != "after the outage" {
			t.Fatalf("consumed %q", v)
		}
	case err := <-done:
		t.Fatalf("RunGroup returned before consuming: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunGroup after cancel: %v", err)
	}
}

// logSignal is a slog handler that sends on ch for every record whose message is msg.
type logSignal struct {
	msg string
	ch  chan<- struct{}
}

func (h logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logSignal) WithGroup(string) slog.Handler      { return h }

// forwardTo listens on addr and forwards every connection to target.
func forwardTo(t *testing.T, addr, target string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.Close() }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return ln
}

// TestRunGroupRefusesBadConfig: a configuration sarama refuses is an error at once, not retried as an outage.
func TestRunGroupRefusesBadConfig(t *testing.T) {
	sc := sarama.NewConfig()
	sc.Consumer.Group.Session.Timeout = 0                                 // sarama: "Consumer.Group.Session.Timeout must be >= 2ms"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	err := RunGroup(ctx, GroupConfig{Brokers: []string{"127.0.0.1:9"}, Sarama: sc, Group: "g", Topics: []string{"t"}},
		func(context.Context, Batch, func(int64)) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "Session.Timeout") || ctx.Err() != nil {
		t.Fatalf("RunGroup with a bad config: %v (ctx %v), want the configuration error at once", err, ctx.Err())
	}
}
