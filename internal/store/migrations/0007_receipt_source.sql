-- 0007_receipt_source: where in the receipts topic a latency row came from, so a collector that is assigned a receipts
-- partition can ask which rows ClickHouse already holds at or past the group's committed offset (the uncommitted tail
-- a crashed or rebalanced-away owner inserted) and keep their re-read copies out of the rollups (Store.HeldLatencyKeys,
-- Writer.Remember). -1 for rows of other paths and for rows stored before this migration.
ALTER TABLE latency_events {{addColumn}} receipt_partition Int32 DEFAULT -1;

ALTER TABLE latency_events {{addColumn}} receipt_offset Int64 DEFAULT -1;
