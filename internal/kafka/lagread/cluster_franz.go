package lagread

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/internal/kafka/franzconn"
)

// sarama has no share-group (KIP-932) or streams-group (KIP-1071) RPCs. ClusterReader sends those few requests with
// franz-go's kmsg over a kgo client used only as a transport: each request goes to the broker the sarama reads already
// chose (the group's coordinator, known from its ListGroups), so batching stays one request per coordinator. The kgo
// client is built from the reader's sarama.Config (client id, timeouts, TLS, SASL), so it connects exactly as the
// sarama connections do; it is created on first use and only when the cluster has share or streams groups.

// franzClient returns the reader's kgo client, creating it on first use.
func (c *ClusterReader) franzClient() (*kgo.Client, error) {
	c.franzMu.Lock()
	defer c.franzMu.Unlock()
	if c.franz != nil {
		return c.franz, nil
	}
	opts, err := franzconn.Options(c.seeds, c.conf)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("new franz-go client: %w", err)
	}
	c.franz = cl
	return cl, nil
}

// franzRequest sends req to broker id over the kgo transport (one request, no retry: the next cycle retries).
func (c *ClusterReader) franzRequest(ctx context.Context, id int32, req kmsg.Request) (kmsg.Response, error) {
	cl, err := c.franzClient()
	if err != nil {
		return nil, err
	}
	c.requests.Add(1)
	return cl.Broker(int(id)).Request(ctx, req)
}
