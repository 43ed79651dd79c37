package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The stream and consumer of the JetStream rows, deleted afterwards.
const (
	jsStream   = "QUEUEBENCH"
	jsSubject  = "queuebench.tasks"
	jsConsumer = "queuebench"
)

func openJetStream(ctx context.Context, e *env) (*suite, error) {
	nc, err := nats.Connect(e.opts.nats)
	if err != nil {
		return nil, fmt.Errorf("NATS at %s: %w", e.opts.nats, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream at %s: %w", e.opts.nats, err)
	}
	j := &jsBench{js: js}
	return &suite{
		durable: fmt.Sprintf("partly: file storage; nats-server %s fsyncs every 2 min (its default sync interval): survives a process crash, not a power loss",
			nc.ConnectedServerVersion()),
		version: fmt.Sprintf("nats.go %s (jetstream) on nats-server %s: stream %s, file storage, work-queue retention",
			moduleVersion("github.com/nats-io/nats.go"), nc.ConnectedServerVersion(), jsStream),
		close: func() error {
			err := j.deleteStream(context.WithoutCancel(ctx))
			nc.Close()
			return err
		},
		cases: []testCase{
			{scenario: ingestSingle, label: "Publish ×1 (waits for the PubAck), 64 goroutines", run: j.ingest(64, 1, j.publish)},
			{scenario: ingestBatch, label: "PublishAsync ×100, then wait for the PubAcks, 8 goroutines", run: j.ingest(8, 100, j.publishAsync)},
			{scenario: work, label: "Fetch(50) + DoubleAck (waits for the server), 4 consumers, a slice's acks at once", run: j.work(50, true)},
			{scenario: work, label: "Fetch(50) + Ack (not confirmed), 4 consumers, a slice's acks at once", run: j.work(50, false),
				note: "an Ack is counted when sent: the server may not have recorded it"},
		},
	}, nil
}

// jsBench holds what the JetStream rows share.
type jsBench struct {
	js jetstream.JetStream
}

func (j *jsBench) deleteStream(ctx context.Context) error {
	err := j.js.DeleteStream(ctx, jsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return err
}

// fresh deletes the stream and makes it again, empty.
func (j *jsBench) fresh(ctx context.Context) (jetstream.Stream, error) {
	if err := j.deleteStream(ctx); err != nil {
		return nil, err
	}
	return j.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      jsStream,
		Subjects:  []string{jsSubject},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	})
}

func (j *jsBench) publish(ctx context.Context, _ int) error {
	_, err := j.js.Publish(ctx, jsSubject, payload)
	return err
}

// publishAsync publishes n messages without waiting, then waits for every
// PubAck.
func (j *jsBench) publishAsync(ctx context.Context, n int) error {
	futures := make([]jetstream.PubAckFuture, n)
	for i := range futures {
		f, err := j.js.PublishAsync(jsSubject, payload)
		if err != nil {
			return err
		}
		futures[i] = f
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (j *jsBench) ingest(g, n int, put putFunc) func(context.Context, *env) (result, error) {
	return func(ctx context.Context, e *env) (result, error) {
		if _, err := j.fresh(ctx); err != nil {
			return result{}, err
		}
		return ingest(ctx, e, g, n, put)
	}
}

// work pre-fills the stream and works it off through a durable pull
// consumer, each ack sent as DoubleAck (waiting for the server's reply) if
// confirmed, else as a plain Ack.
func (j *jsBench) work(n int, confirmed bool) func(context.Context, *env) (result, error) {
	return func(ctx context.Context, e *env) (result, error) {
		stream, err := j.fresh(ctx)
		if err != nil {
			return result{}, err
		}
		guess := 30000.0 // tasks/s, before a round has measured the row
		if !confirmed {
			guess = 80000
		}
		backlog := e.backlog(guess)
		if err := fill(ctx, backlog, 4, 500, j.publishAsync); err != nil {
			return result{}, err
		}
		cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       jsConsumer,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: -1,
		})
		if err != nil {
			return result{}, err
		}
		l := leaser{
			lease: func(_ context.Context, n int) ([]func(context.Context) error, error) {
				b, err := cons.Fetch(n, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					return nil, err
				}
				var acks []func(context.Context) error
				for m := range b.Messages() {
					if confirmed {
						acks = append(acks, m.DoubleAck)
					} else {
						acks = append(acks, func(context.Context) error { return m.Ack() })
					}
				}
				if err := b.Error(); err != nil && len(acks) == 0 && !errors.Is(err, nats.ErrTimeout) {
					return nil, err
				}
				return acks, nil
			},
			ready: func(ctx context.Context) (int64, error) {
				info, err := cons.Info(ctx)
				if err != nil {
					return 0, err
				}
				return int64(info.NumPending), nil
			},
		}
		r, err := relay(ctx, e, 4, n, n, l)
		r.backlog = backlog
		return r, err
	}
}
