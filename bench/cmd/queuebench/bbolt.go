package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// The raw bbolt rows are reference points for a group commit: a task is
// one key (a bucket sequence) and its payload, written in one transaction
// per call (db.Update) or in transactions that db.Batch forms from
// concurrent calls.
func openBolt(_ context.Context, e *env) (*suite, error) {
	return &suite{
		durable: "yes: fsync per commit (bbolt's default)",
		version: fmt.Sprintf("bbolt %s, a new file per row, default options (db.Batch: MaxBatchSize 1000, MaxBatchDelay 10ms)",
			moduleVersion("go.etcd.io/bbolt")),
		close: func() error { return nil },
		cases: []testCase{
			{scenario: ingestSingle, label: "db.Update per task, 64 goroutines", run: boltIngest(64, 1, (*bolt.DB).Update)},
			{scenario: ingestSingle, label: "db.Batch per task, 64 goroutines", run: boltIngest(64, 1, (*bolt.DB).Batch)},
			{scenario: ingestBatch, label: "db.Update ×100 per transaction, 8 goroutines", run: boltIngest(8, 100, (*bolt.DB).Update)},
		},
	}, nil
}

var boltBucket = []byte("tasks")

// boltIngest measures g goroutines writing n tasks per call with commit
// (db.Update or db.Batch) into a new file.
func boltIngest(g, n int, commit func(*bolt.DB, func(*bolt.Tx) error) error) func(context.Context, *env) (result, error) {
	return func(ctx context.Context, e *env) (result, error) {
		dir, err := e.dataDir()
		if err != nil {
			return result{}, err
		}
		defer os.RemoveAll(dir)
		db, err := bolt.Open(filepath.Join(dir, "bolt.db"), 0o600, nil)
		if err != nil {
			return result{}, err
		}
		defer db.Close()
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket(boltBucket)
			return err
		})
		if err != nil {
			return result{}, err
		}
		r, err := ingest(ctx, e, g, n, func(_ context.Context, n int) error {
			return commit(db, func(tx *bolt.Tx) error {
				b := tx.Bucket(boltBucket)
				for range n {
					seq, err := b.NextSequence()
					if err != nil {
						return err
					}
					if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), payload); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return r, err
		}
		return r, db.Close()
	}
}
